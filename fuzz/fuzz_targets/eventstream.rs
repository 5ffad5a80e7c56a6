//! Bedrock's event stream as an upstream may send it: any bytes, cut
//! anywhere, must decode to events or an error, never a panic or an
//! unbounded wait; what decodes, encoded back, decodes to the same events.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolstub::protocol::bedrock::eventstream::{encode, Decoder};

fuzz_target!(|data: &[u8]| {
    let cut = data.first().map_or(0, |b| *b as usize).min(data.len());
    let mut decoder = Decoder::default();
    let mut events = Vec::new();
    for piece in [&data[..cut], &data[cut..]] {
        match decoder.push(piece) {
            Ok(more) => events.extend(more),
            Err(_) => return,
        }
    }
    let sse: Vec<u8> = events.iter().flat_map(|e| e.raw.iter().copied()).collect();
    let again = Decoder::default()
        .push(&encode(&sse))
        .expect("frames toolstub wrote decode");
    let data_of = |es: &[toolstub::recall::sse::Event]| -> Vec<Option<String>> {
        es.iter().map(|e| e.data.clone()).collect()
    };
    assert_eq!(data_of(&again), data_of(&events));
});
