/* Transpose: output axis j is input axis perm[j] (the perm attribute, else the axes reversed; a negative entry
 * counts from the end, as numpy's np.transpose takes it). One strided read of the input in the output's order
 * (move_strided_copy: extent-1 axes dropped, axes that stay neighbours merged, the innermost axis by memcpy
 * when it stays innermost, else a loop per element size). */
#include <string.h>

#include "move.h"

#define SHAPE_TEXT 256

static OrtStatus* transpose_compute(OrtKernelImpl* this_ptr, OrtKernelContext* ctx) {
  const MoveKernel* k = (const MoveKernel*)this_ptr;
  MoveTensor x;
  int present;
  int64_t perm[MOVE_MAX_RANK], dims[MOVE_MAX_RANK], strides[MOVE_MAX_RANK], in_strides[MOVE_MAX_RANK];
  unsigned char seen[MOVE_MAX_RANK];
  size_t i;
  char* y = NULL;
  char a[SHAPE_TEXT], b[SHAPE_TEXT];
  ORT_KERNEL_RETURN_IF_ERROR(move_input(k, ctx, 0, "data", 1, &x, &present));
  if (k->perm_rank && k->perm_rank != x.rank)
    return move_error(k, "perm %s has %zu entries for the input of shape %s; it needs one per axis",
                      move_shape_str(b, sizeof b, k->perm, k->perm_rank), k->perm_rank,
                      move_shape_str(a, sizeof a, x.dims, x.rank));
  memset(seen, 0, sizeof seen);
  for (i = 0; i < x.rank; ++i) {
    int64_t p = k->perm_rank ? k->perm[i] : (int64_t)(x.rank - 1 - i);
    if (p < 0) p += (int64_t)x.rank;
    if (p < 0 || p >= (int64_t)x.rank || seen[p])
      return move_error(k, "perm %s is not a permutation of the %zu axes of the input of shape %s",
                        move_shape_str(b, sizeof b, k->perm, k->perm_rank), x.rank,
                        move_shape_str(a, sizeof a, x.dims, x.rank));
    seen[p] = 1;
    perm[i] = p;
  }
  for (i = x.rank; i-- > 0;) in_strides[i] = i + 1 == x.rank ? 1 : in_strides[i + 1] * x.dims[i + 1];
  for (i = 0; i < x.rank; ++i) {
    dims[i] = x.dims[perm[i]];
    strides[i] = in_strides[perm[i]];
  }
  ORT_KERNEL_RETURN_IF_ERROR(move_output(ctx, dims, x.rank, &y));
  if (x.count) move_strided_copy(y, x.data, x.elem_size, x.rank, dims, strides);
  return NULL;
}

static OrtStatus* transpose_create(void* state, const OrtKernelInfo* info, OrtKernelImpl** out) {
  MoveKernel* k;
  const int64_t* perm = NULL;
  size_t n = 0;
  (void)state;
  ORT_KERNEL_RETURN_IF_ERROR(move_api->KernelInfo_GetAttributeInts(info, "perm", &perm, &n));
  ORT_KERNEL_RETURN_IF_ERROR(move_new(info, "Transpose", transpose_compute, &k));
  if (n > MOVE_MAX_RANK) {
    OrtStatus* st = move_error(k, "perm has %zu entries; this C kernel takes ranks up to %d", n, MOVE_MAX_RANK);
    k->base.Release(&k->base);
    return st;
  }
  if (n) memcpy(k->perm, perm, n * sizeof *perm);
  k->perm_rank = n;
  *out = &k->base;
  return NULL;
}

OrtStatus* move_register_transpose(OrtKernelRegistry* registry) {
  return move_register(registry, "Transpose", 1, "T", transpose_create);
}
