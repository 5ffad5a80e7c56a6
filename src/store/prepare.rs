//! What a put derives from each output before any backend writes it: the
//! SHA-256, the ref, the length in code points, the chunk boundaries and the
//! synopsis JSON. Computed on the caller's thread (or the blocking pool for
//! large outputs), so hashing runs in parallel and a writer only writes.

use super::text_index::{self, MAX_CHUNKS};
use super::{NewOutput, StoreError};

/// An output with everything derived from its text, computed on the
/// caller's thread so hashing runs in parallel and the writer only writes.
pub(crate) struct Prepared {
    pub output: NewOutput,
    pub sha256: String,
    pub result_ref: String,
    pub chars: u64,
    pub synopsis_json: String,
    /// (start_char, start_byte, end_byte) of each chunk.
    pub chunks: Vec<(u64, usize, usize)>,
}

/// Validates and derives (SHA-256, ref, length, chunks, synopsis JSON).
pub(crate) fn prepare(outputs: Vec<NewOutput>) -> Result<Vec<Prepared>, StoreError> {
    outputs.into_iter().map(prepare_one).collect()
}

fn prepare_one(output: NewOutput) -> Result<Prepared, StoreError> {
    if output.session_id.is_empty() {
        return Err(StoreError::InvalidArgument(
            "session_id must not be empty".to_string(),
        ));
    }
    let sha256 = match &output.sha256 {
        Some(known) => {
            debug_assert_eq!(*known, crate::refs::sha256_hex(&output.text));
            known.clone()
        }
        None => crate::refs::sha256_hex(&output.text),
    };
    let result_ref = crate::refs::result_ref(output.tool_call_id.as_deref(), &sha256);
    let base = output.text.as_ptr() as usize;
    let mut chars = 0;
    let chunks: Vec<(u64, usize, usize)> = text_index::chunks(&output.text)
        .into_iter()
        .map(|c| {
            let start = c.text.as_ptr() as usize - base;
            chars = c.start_char + c.chars;
            (c.start_char, start, start + c.text.len())
        })
        .collect();
    if chunks.len() > MAX_CHUNKS {
        return Err(StoreError::TooLarge {
            chars,
            limit: (MAX_CHUNKS * text_index::CHUNK_CHARS) as u64,
        });
    }
    let synopsis_json =
        serde_json::to_string(&output.synopsis).map_err(|source| StoreError::Synopsis {
            result_ref: result_ref.clone(),
            source,
        })?;
    Ok(Prepared {
        output,
        sha256,
        result_ref,
        chars,
        synopsis_json,
        chunks,
    })
}

/// Below this many bytes of text, hashing a put inline costs less than a
/// hand-off to the blocking pool (SHA-256 runs at about 2 GB/s).
const INLINE_PREPARE_BYTES: usize = 64 * 1024;

/// [`prepare`] from async code: inline for small puts, on the blocking pool
/// for large ones (a 1 MB output hashes for about half a millisecond).
pub(crate) async fn prepare_async(outputs: Vec<NewOutput>) -> Result<Vec<Prepared>, StoreError> {
    let bytes: usize = outputs.iter().map(|o| o.text.len()).sum();
    if bytes <= INLINE_PREPARE_BYTES {
        prepare(outputs)
    } else {
        tokio::task::spawn_blocking(move || prepare(outputs))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))?
    }
}
