"""The Triton kernels of the ``triton`` attention backend: every key read in place through the slot table.

No kernel gathers a sequence's keys into a contiguous copy: each block of key
positions is turned into cache slots by ``req_to_token[row, position]`` and
loaded from the paged K/V buffers where they lie. Softmax is online (a running
maximum and sum per query row), accumulated in float32 whatever the cache's
dtype.

- Decode (one new token per sequence) is split over the key length: each of
  ``num_splits`` programs per (sequence, head) attends over its share of the
  keys and leaves its partial output and log-sum-exp; a second kernel merges
  them. A long sequence is then many programs, not one long loop. The grid
  depends only on the batch size, never on sequence lengths, so a decode step
  can be captured in a CUDA graph.
- Extend (prompt tokens, chunks, decode rows mixed in) runs one program per
  block of a sequence's new tokens and head: its keys are the cached prefix
  and the new tokens up to each query's own position, causally masked (key 0
  is visible to every query, so no row's softmax is ever over nothing). The
  new tokens' K/V are written to the cache before either kernel runs.

GQA: a query head reads the KV head ``head // (num_heads // num_kv_heads)``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_split_kernel(
    q_ptr, q_stride_token, q_stride_head,
    k_cache_ptr, v_cache_ptr, cache_stride_slot, cache_stride_head,
    req_to_token_ptr, req_to_token_stride, req_pool_indices_ptr, seq_lens_ptr,
    partial_out_ptr, partial_lse_ptr, scaling,
    NUM_HEADS: tl.constexpr, GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    split = tl.program_id(2)
    kv_head = head // GROUP_SIZE
    seq_len = tl.load(seq_lens_ptr + seq)
    row = tl.load(req_pool_indices_ptr + seq)
    split_len = tl.cdiv(seq_len, NUM_SPLITS)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HEAD_DIM
    q = tl.load(q_ptr + seq * q_stride_token + head * q_stride_head + dims, mask=dim_mask, other=0.0).to(tl.float32)
    running_max = -float("inf")
    running_sum = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for block_start in range(start, end, BLOCK_N):
        positions = block_start + tl.arange(0, BLOCK_N)
        position_mask = positions < end
        slots = tl.load(req_to_token_ptr + row * req_to_token_stride + positions, mask=position_mask, other=0)
        offsets = slots[:, None] * cache_stride_slot + kv_head * cache_stride_head + dims[None, :]
        load_mask = position_mask[:, None] & dim_mask[None, :]
        k = tl.load(k_cache_ptr + offsets, mask=load_mask, other=0.0).to(tl.float32)
        scores = tl.sum(q[None, :] * k, 1) * scaling
        scores = tl.where(position_mask, scores, -float("inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 0))
        weights = tl.exp(scores - new_max)
        rescale = tl.exp(running_max - new_max)
        v = tl.load(v_cache_ptr + offsets, mask=load_mask, other=0.0).to(tl.float32)
        acc = acc * rescale + tl.sum(weights[:, None] * v, 0)
        running_sum = running_sum * rescale + tl.sum(weights, 0)
        running_max = new_max

    partial = (seq * NUM_HEADS + head) * NUM_SPLITS + split
    # A non-empty split's sum is at least 1 (its maximum contributes exp(0)); an empty one's is 0, its acc 0.
    tl.store(partial_out_ptr + partial * BLOCK_D + dims, acc / tl.maximum(running_sum, 1.0))
    lse = tl.where(running_sum > 0, running_max + tl.log(tl.maximum(running_sum, 1.0)), -float("inf"))
    tl.store(partial_lse_ptr + partial, lse)


@triton.jit
def _decode_merge_kernel(
    partial_out_ptr, partial_lse_ptr, out_ptr, out_stride_token,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, NUM_SPLITS: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    splits = tl.arange(0, NUM_SPLITS)
    dims = tl.arange(0, BLOCK_D)
    partial = (seq * NUM_HEADS + head) * NUM_SPLITS + splits
    lse = tl.load(partial_lse_ptr + partial)
    weights = tl.exp(lse - tl.max(lse, 0))  # an empty split's lse is -inf: weight 0
    outs = tl.load(partial_out_ptr + partial[:, None] * BLOCK_D + dims[None, :])
    merged = tl.sum(weights[:, None] * outs, 0) / tl.sum(weights, 0)
    out_offsets = seq * out_stride_token + head * HEAD_DIM + dims
    tl.store(out_ptr + out_offsets, merged.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)


@triton.jit
def _extend_kernel(
    q_ptr, q_stride_token, q_stride_head,
    k_cache_ptr, v_cache_ptr, cache_stride_slot, cache_stride_head,
    req_to_token_ptr, req_to_token_stride, req_pool_indices_ptr, prefix_lens_ptr, extend_lens_ptr,
    extend_start_loc_ptr, out_ptr, out_stride_token, scaling,
    GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_IN_FLOAT32: tl.constexpr, PRECISION: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    query_block = tl.program_id(2)
    row = tl.load(req_pool_indices_ptr + seq)
    prefix_len = tl.load(prefix_lens_ptr + seq)
    extend_len = tl.load(extend_lens_ptr + seq)
    first_token = tl.load(extend_start_loc_ptr + seq)

    offsets_m = query_block * BLOCK_M + tl.arange(0, BLOCK_M)
    query_mask = offsets_m < extend_len
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < HEAD_DIM
    q_offsets = (first_token + offsets_m)[:, None] * q_stride_token + head * q_stride_head + dims[None, :]
    dot_dtype = tl.float32 if DOT_IN_FLOAT32 else k_cache_ptr.dtype.element_ty
    q = tl.load(q_ptr + q_offsets, mask=query_mask[:, None] & dim_mask[None, :], other=0.0).to(dot_dtype)

    running_max = tl.full([BLOCK_M], -float("inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # Keys up to the block's last real query (past the sequence's new tokens, nothing).
    key_end = prefix_len + tl.minimum((query_block + 1) * BLOCK_M, extend_len)
    for block_start in range(0, key_end, BLOCK_N):
        positions = block_start + tl.arange(0, BLOCK_N)
        position_mask = positions < key_end
        slots = tl.load(req_to_token_ptr + row * req_to_token_stride + positions, mask=position_mask, other=0)
        offsets = slots[:, None] * cache_stride_slot + (head // GROUP_SIZE) * cache_stride_head + dims[None, :]
        load_mask = position_mask[:, None] & dim_mask[None, :]
        k = tl.load(k_cache_ptr + offsets, mask=load_mask, other=0.0).to(dot_dtype)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scaling
        visible = (positions[None, :] <= (prefix_len + offsets_m)[:, None]) & position_mask[None, :]
        scores = tl.where(visible, scores, -float("inf"))
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(running_max - new_max)
        v = tl.load(v_cache_ptr + offsets, mask=load_mask, other=0.0).to(dot_dtype)
        acc = acc * rescale[:, None] + tl.dot(weights.to(dot_dtype), v, input_precision=PRECISION)
        running_sum = running_sum * rescale + tl.sum(weights, 1)
        running_max = new_max

    out_offsets = (first_token + offsets_m)[:, None] * out_stride_token + head * HEAD_DIM + dims[None, :]
    out = (acc / running_sum[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + out_offsets, out, mask=query_mask[:, None] & dim_mask[None, :])


def _block_d(head_dim: int) -> int:
    # tl.dot needs every block dimension to be at least 16.
    return max(16, triton.next_power_of_2(head_dim))


def decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor, seq_lens: torch.Tensor, out: torch.Tensor, scaling: float, *,
    num_splits: int, block_n: int,
) -> None:
    """Attention of one new token per sequence (``q``: [B, H, D]) into ``out`` ([B, H * D]).

    ``num_splits`` (a power of two) programs share each sequence's keys."""
    batch_size, num_heads, head_dim = q.shape
    block_d = _block_d(head_dim)
    partial_out = torch.empty((batch_size, num_heads, num_splits, block_d), dtype=torch.float32, device=q.device)
    partial_lse = torch.empty((batch_size, num_heads, num_splits), dtype=torch.float32, device=q.device)
    _decode_split_kernel[(batch_size, num_heads, num_splits)](
        q, q.stride(0), q.stride(1), k_cache, v_cache, k_cache.stride(0), k_cache.stride(1),
        req_to_token, req_to_token.stride(0), req_pool_indices, seq_lens, partial_out, partial_lse, scaling,
        NUM_HEADS=num_heads, GROUP_SIZE=num_heads // k_cache.shape[1], HEAD_DIM=head_dim, BLOCK_D=block_d,
        NUM_SPLITS=num_splits, BLOCK_N=block_n,
    )
    _decode_merge_kernel[(batch_size, num_heads)](
        partial_out, partial_lse, out, out.stride(0),
        NUM_HEADS=num_heads, HEAD_DIM=head_dim, BLOCK_D=block_d, NUM_SPLITS=num_splits,
    )


def extend_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, extend_lens: torch.Tensor,
    extend_start_loc: torch.Tensor, max_extend_len: int, out: torch.Tensor, scaling: float, *,
    block_m: int, block_n: int, dot_in_float32: bool,
) -> None:
    """Causal attention of every new token (``q``: [T, H, D]) over its cached prefix and
    the new tokens up to itself, into ``out`` ([T, H * D]).

    ``dot_in_float32``: the matrix products take float32 operands, not the cache's dtype
    (Triton 3.9's interpreter multiplies bfloat16 matrices wrongly; a GPU does not)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    grid = (req_pool_indices.shape[0], num_heads, triton.cdiv(max_extend_len, block_m))
    _extend_kernel[grid](
        q, q.stride(0), q.stride(1), k_cache, v_cache, k_cache.stride(0), k_cache.stride(1),
        req_to_token, req_to_token.stride(0), req_pool_indices, prefix_lens, extend_lens, extend_start_loc,
        out, out.stride(0), scaling,
        GROUP_SIZE=num_heads // k_cache.shape[1], HEAD_DIM=head_dim, BLOCK_D=_block_d(head_dim),
        BLOCK_M=block_m, BLOCK_N=block_n, DOT_IN_FLOAT32=dot_in_float32,
        # float32 operands multiply in full precision (not TF32); bfloat16 ones take the default.
        PRECISION="ieee" if dot_in_float32 or k_cache.dtype == torch.float32 else "tf32",
    )
