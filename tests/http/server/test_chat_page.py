"""The chat page and its icon: served without the API key, the icon linked from the page."""

import pytest
from http_stand_in import StandInTokenizerManager, client_for

from tercet.http.server.app import create_app

pytestmark = pytest.mark.anyio


async def test_the_icon_is_served_without_the_key_and_the_page_links_it():
    async with client_for(create_app(StandInTokenizerManager(), api_key="secret-key")) as client:
        icon = await client.get("/favicon.ico")
        page = await client.get("/")
        models = await client.get("/v1/models")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.startswith("<svg")
    assert page.status_code == 200 and '<link rel="icon" type="image/svg+xml" href="/favicon.ico">' in page.text
    assert models.status_code == 401
