import asyncio
import io

from tercet.bench.progress import BAR_WIDTH, Progress, is_terminal


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_a_bar_redrawn_in_place():
    stream = Terminal()
    progress = Progress(4, stream)
    assert progress.live and is_terminal(stream)
    progress.note(True)
    progress.note(False)
    assert stream.getvalue().count("\r") == 2
    assert f"[{'#' * (BAR_WIDTH // 2)}{'.' * (BAR_WIDTH // 2)}] 2/4 requests, 1 failed" in stream.getvalue()
    progress.finish()
    assert stream.getvalue().endswith("\x1b[K\n")


def test_anywhere_else_plain_lines_every_interval():
    stream = io.StringIO()
    progress = Progress(3, stream, interval=0.01)
    assert not progress.live
    progress.note(True)

    async def run_a_while():
        task = asyncio.create_task(progress.print_periodically())
        while "\n" not in stream.getvalue():
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(run_a_while())
    progress.finish()
    assert stream.getvalue().startswith("tercet bench: 1/3 requests done, 0 failed")
    assert "\r" not in stream.getvalue() and "[" not in stream.getvalue()
