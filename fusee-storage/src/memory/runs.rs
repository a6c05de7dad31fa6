//! The memory backend's run-store part.

use std::sync::Arc;

use fusee_core::shard::BlobRef;

use super::{Frame, Part};
use crate::contract::RunStore;
use crate::limits::{MAX_OFFSET, check_frame_len};
use crate::{Result, StorageError};

/// The memory backend's run-store part.
#[derive(Debug)]
pub struct MemoryRuns {
    pub(super) part: Part,
    pub(super) position: u64,
}

const RUNS: &str = "memory run store";

impl RunStore for MemoryRuns {
    fn append(&mut self, frame: &[u8]) -> Result<BlobRef> {
        let mut s = self.part.lock(RUNS)?;
        if s.runs_latched {
            return Err(StorageError::Latched { what: RUNS });
        }
        let len = check_frame_len(frame)?;
        let offset = s.next_offset;
        // Empty frames take one address so every frame has its own offset.
        let end = offset + u64::from(len.max(1));
        if end > MAX_OFFSET {
            return Err(StorageError::TooLarge {
                what: "run store",
                len: end,
                max: MAX_OFFSET,
            });
        }
        s.frames.insert(
            offset,
            Frame {
                bytes: Arc::from(frame),
                released: false,
            },
        );
        s.next_offset = end;
        self.position = end;
        Ok(BlobRef { offset, len })
    }

    fn read(&mut self, blob: BlobRef, out: &mut Vec<u8>) -> Result<()> {
        let bytes = {
            let s = self.part.lock(RUNS)?;
            match s.frames.get(&blob.offset) {
                Some(f) if !f.released && f.bytes.len() == blob.len as usize => {
                    Arc::clone(&f.bytes)
                }
                _ => return Err(StorageError::UnknownBlob { blob }),
            }
        };
        out.clear();
        out.extend_from_slice(&bytes);
        Ok(())
    }

    fn release(&mut self, blob: BlobRef) -> Result<()> {
        let mut s = self.part.lock(RUNS)?;
        if s.runs_latched {
            return Err(StorageError::Latched { what: RUNS });
        }
        match s.frames.get_mut(&blob.offset) {
            Some(f) if !f.released && f.bytes.len() == blob.len as usize => {
                f.released = true;
                Ok(())
            }
            _ => Err(StorageError::UnknownBlob { blob }),
        }
    }

    fn compact(&mut self, _moved: &mut dyn FnMut(BlobRef, BlobRef)) -> Result<u64> {
        let s = self.part.lock(RUNS)?;
        if s.runs_latched {
            return Err(StorageError::Latched { what: RUNS });
        }
        // Released frames are dropped by the commit that makes the release
        // durable; nothing ever moves.
        Ok(0)
    }

    fn position(&self) -> u64 {
        self.position
    }
}
