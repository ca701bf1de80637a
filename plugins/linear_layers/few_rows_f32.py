"""float32 linear layers on CPU that run near the memory's speed for a few rows.

``F.linear(x, W)`` computes ``x @ W.T``. For one row torch hands it to a
matrix-vector kernel that reads ``W`` on one thread; from two rows on it
takes a general matrix product that packs ``W`` first. Either way a decode
step's few rows read the weights well below the memory's speed: measured here
(all the default model's float32 weights, 2 cores, best of 5), 43.6 ms at
1 row, 53.9 ms at 5, 63.9 ms at 9. ``W @ x.T`` is the same product with ``W``
as the left matrix, which the kernel streams on every thread without
packing: 17.4 ms at 2 rows, 29.3 ms at 5, 52.1 ms at 9. A single row is fed
twice (two rows are cheaper than one). Past :data:`MAX_ROWS` rows the packing
pays for itself (at 13 rows ``F.linear`` took 65 ms, ``W @ x.T`` 87 ms) and
the layer is ``F.linear`` again.

These are the steps of a float32 model serving few requests, and the
verification of speculative drafts (the last token plus ``k`` drafts). The
sums are the same in another order: results differ from ``F.linear``'s at
the level of float32's rounding, as ``F.linear``'s own differ between one row
and several.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 9


def can_use(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype == torch.float32


class FewRowsLinear(nn.Linear):
    """``nn.Linear`` whose forward at up to :data:`MAX_ROWS` rows multiplies with the weight on the left."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        count = rows.shape[0]
        if count > MAX_ROWS or count == 0:
            return F.linear(x, self.weight, self.bias)
        if count == 1:
            rows = torch.cat((rows, rows))
        out = torch.mm(self.weight, rows.t()).t()[:count]
        if self.bias is not None:
            out = out + self.bias
        return out.contiguous().view(*x.shape[:-1], self.out_features)
