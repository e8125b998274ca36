// Copying a shard's weight matrices out of the model file's mapping into memory of the process.
#pragma once

#include "loom/base/status.h"
#include "loom/model/transformer.h"

namespace loom::model {

// Copies every matrix the forward pass streams (the layers' projections and the output head; not
// the embedding table, of which a token reads one row) into one buffer backed by huge pages, rows
// packed back to back, and points the views at it.  Column slices packed earlier (BindCols) are
// released.  Decoding reads each weight once per token: with 4 KiB pages of a file mapping, a
// page-table walk every 4 KiB slows that stream (measured ~5% in our VMs).
Status CopyMatricesToMemory(TransformerWeights* weights);

// Bytes CopyMatricesToMemory would allocate.
int64_t CopiedMatrixBytes(const TransformerWeights& weights);

// Whether copying leaves memory to spare: `copies` such copies made at once take under half of the
// memory available now (engine::WeightPlacement::kAuto).
bool CopyFitsInMemory(const TransformerWeights& weights, int copies = 1);

}  // namespace loom::model
