//! Run-store entries and checkpoints (to be written).
