// Copying weight matrices out of the model file's mapping into memory of the process: one matrix
// packed (a tensor-parallel column slice, BindCols) or all of a shard's (CopyMatricesToMemory).
#pragma once

#include "loom/base/status.h"
#include "loom/model/transformer.h"

namespace loom::model {

// Copies every matrix the forward pass streams (the layers' projections and the output head; not
// the embedding table, of which a token reads one row) into one buffer backed by huge pages, rows
// packed back to back, and points the views at it.  Column slices packed earlier (BindCols) are
// released.  Decoding reads each weight once per token: with 4 KiB pages of a file mapping, a
// page-table walk every 4 KiB slows that stream (measured ~5% in our VMs on dense models; a
// mixture's experts, read 8 of 128 at a time in pieces under a megabyte, lose more: see
// docs/moe.md).  `experts`: a mixture's routed experts are copied too; without, they stay in the
// file's mapping (a token reads only its experts' pages, so a model whose experts do not fit in
// memory still runs).
Status CopyMatricesToMemory(TransformerWeights* weights, bool experts = true);

// Bytes PackMatrix writes for m: its rows back to back, then (MLX) its scales' and biases' rows,
// each part starting 64-byte aligned.
int64_t PackedMatrixBytes(const kernels::MatrixView& m);
// Copies m's rows (and MLX scales and biases) to dst (64-byte aligned, PackedMatrixBytes(m) bytes)
// as PackedMatrixBytes describes, in the layout this CPU's kernels read fastest
// (kernels::PreferredLayout), and points m at the copy.
void PackMatrix(kernels::MatrixView* m, std::byte* dst);

// Bytes CopyMatricesToMemory(weights, experts) would allocate.
int64_t CopiedMatrixBytes(const TransformerWeights& weights, bool experts = true);

// Whether copying leaves memory to spare: `copies` such copies made at once take under half of the
// memory available now (engine::WeightPlacement::kAuto).
bool CopyFitsInMemory(const TransformerWeights& weights, int copies = 1, bool experts = true);

}  // namespace loom::model
