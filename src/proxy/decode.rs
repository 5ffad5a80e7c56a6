//! Compressed upstream responses the proxy must read. A recall round asks
//! for `Accept-Encoding: identity`, yet an upstream (or a gateway before
//! it) may compress anyway: a response spliced or parsed as text must be
//! decoded first, or a recall call hidden in compressed bytes reaches the
//! client and plain events get appended to a gzip body.
//!
//! gzip, deflate (zlib), br and zstd are decoded by `async-compression`, as
//! the body streams (the output comes in pieces of at most
//! [`PIECE_BYTES`], as the reader asks for them: a small body that inflates
//! to gigabytes is never held whole, and a body read whole stays within its
//! reader's cap); the response then loses its `Content-Encoding` and
//! `Content-Length`. Any other coding is reported, for the caller to refuse
//! (a response it must splice is never passed on as it came). A response
//! the proxy only forwards goes as it came, compressed or not.

use super::body::{BoxBody, BoxError};
use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder, ZlibDecoder, ZstdDecoder};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http::{header, HeaderMap, Response};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncBufRead, AsyncRead, BufReader};

/// The largest piece of decoded output produced at once.
const PIECE_BYTES: usize = 32 * 1024;

/// A content coding the proxy decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    Gzip,
    /// HTTP's `deflate`: the zlib format (RFC 9110 8.4.1.2).
    Zlib,
    Brotli,
    Zstd,
}

/// The codings of a response, in the order they were applied (identity
/// left out); `Err` names the first one the proxy cannot decode.
fn codings(headers: &HeaderMap) -> Result<Vec<Coding>, String> {
    let mut out = Vec::new();
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let Ok(value) = value.to_str() else {
            return Err(String::from_utf8_lossy(value.as_bytes()).into_owned());
        };
        for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let coding = match token.to_ascii_lowercase().as_str() {
                "identity" => continue,
                "gzip" | "x-gzip" => Coding::Gzip,
                "deflate" => Coding::Zlib,
                "br" => Coding::Brotli,
                "zstd" => Coding::Zstd,
                _ => return Err(token.to_string()),
            };
            out.push(coding);
        }
    }
    Ok(out)
}

/// Whether every coding of `headers`' `Content-Encoding` is one the proxy
/// decodes.
pub fn can_decode(headers: &HeaderMap) -> bool {
    codings(headers).is_ok()
}

/// Whether a response's body is compressed (any coding but identity).
pub fn is_encoded(headers: &HeaderMap) -> bool {
    headers.get_all(header::CONTENT_ENCODING).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .map(<[u8]>::trim_ascii)
            .any(|t| !t.is_empty() && !t.eq_ignore_ascii_case(b"identity"))
    })
}

/// A response body as the proxy reads it: as it came, or decoded.
pub enum Decoded<B> {
    Plain(B),
    Decoding(BoxBody),
}

impl<B> Body for Decoded<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            Decoded::Plain(body) => Pin::new(body).poll_frame(cx),
            Decoded::Decoding(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Decoded::Plain(body) => body.is_end_stream(),
            Decoded::Decoding(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Decoded::Plain(body) => body.size_hint(),
            Decoded::Decoding(body) => body.size_hint(),
        }
    }
}

/// `response` with its body decoded when it is compressed (its
/// `Content-Encoding` and `Content-Length` dropped); `Err` names a coding
/// the proxy cannot decode.
pub fn decoded<B>(response: Response<B>) -> Result<Response<Decoded<B>>, String>
where
    B: Body<Data = Bytes, Error = BoxError> + Send + Sync + Unpin + 'static,
{
    if !is_encoded(response.headers()) {
        return Ok(response.map(Decoded::Plain));
    }
    let codings = codings(response.headers())?;
    let (mut head, body) = response.into_parts();
    head.headers.remove(header::CONTENT_ENCODING);
    head.headers.remove(header::CONTENT_LENGTH);
    Ok(Response::from_parts(
        head,
        Decoded::Decoding(decoding(body, &codings)),
    ))
}

type Reader = Pin<Box<dyn AsyncBufRead + Send + Sync>>;

/// `body` decoded by each of `codings`, last applied first decoded.
fn decoding<B>(body: B, codings: &[Coding]) -> BoxBody
where
    B: Body<Data = Bytes, Error = BoxError> + Send + Sync + Unpin + 'static,
{
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    let mut reader: Reader = Box::pin(tokio_util::io::StreamReader::new(stream));
    for coding in codings.iter().rev() {
        let decoder: Pin<Box<dyn AsyncRead + Send + Sync>> = match coding {
            Coding::Gzip => {
                let mut gzip = GzipDecoder::new(reader);
                gzip.multiple_members(true);
                Box::pin(gzip)
            }
            Coding::Zlib => Box::pin(ZlibDecoder::new(reader)),
            Coding::Brotli => Box::pin(BrotliDecoder::new(reader)),
            // A zstd frame may ask for a window of up to 2 GiB, which the
            // decoder would hold whatever the frame's size: at most 8 MiB,
            // as HTTP's zstd coding says (brotli's is 16 MiB by format).
            Coding::Zstd => Box::pin(ZstdDecoder::new_for_http(reader)),
        };
        reader = Box::pin(BufReader::with_capacity(PIECE_BYTES, decoder));
    }
    let pieces = tokio_util::io::ReaderStream::with_capacity(reader, PIECE_BYTES)
        .map_ok(Frame::data)
        .map_err(BoxError::from);
    http_body_util::StreamBody::new(pieces).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_compression::tokio::write::{BrotliEncoder, GzipEncoder, ZlibEncoder, ZstdEncoder};
    use tokio::io::AsyncWriteExt;

    async fn encode(coding: Coding, data: &[u8]) -> Vec<u8> {
        async fn run<W: tokio::io::AsyncWrite + Unpin>(mut w: W, data: &[u8]) -> W {
            w.write_all(data).await.expect("write");
            w.shutdown().await.expect("finish");
            w
        }
        match coding {
            Coding::Gzip => run(GzipEncoder::new(Vec::new()), data).await.into_inner(),
            Coding::Zlib => run(ZlibEncoder::new(Vec::new()), data).await.into_inner(),
            Coding::Brotli => run(BrotliEncoder::new(Vec::new()), data).await.into_inner(),
            Coding::Zstd => run(ZstdEncoder::new(Vec::new()), data).await.into_inner(),
        }
    }

    fn response(encoding: &str, body: Vec<u8>) -> Response<BoxBody> {
        let mut response = Response::new(super::super::body::full(body));
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, encoding.parse().expect("value"));
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, "1".parse().expect("value"));
        response
    }

    #[tokio::test]
    async fn every_coding_the_proxy_knows_is_decoded_in_pieces() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("data: {{\"n\":{i}}}\n\n").into_bytes())
            .collect();
        for (name, coding) in [
            ("gzip", Coding::Gzip),
            ("x-gzip", Coding::Gzip),
            ("deflate", Coding::Zlib),
            ("br", Coding::Brotli),
            ("ZSTD", Coding::Zstd),
        ] {
            let encoded = encode(coding, &text).await;
            let decoded = decoded(response(name, encoded)).expect("known");
            assert!(decoded.headers().get(header::CONTENT_ENCODING).is_none());
            assert!(decoded.headers().get(header::CONTENT_LENGTH).is_none());
            let mut body = decoded.into_body();
            let mut out = Vec::new();
            while let Some(frame) = body.frame().await {
                let data = frame.expect("decoded").into_data().expect("data");
                assert!(data.len() <= PIECE_BYTES, "{name}: {}", data.len());
                out.extend_from_slice(&data);
            }
            assert!(out == text, "{name}");
        }
    }

    #[tokio::test]
    async fn codings_applied_in_turn_are_undone_in_turn_and_identity_is_none() {
        let text = b"{\"choices\":[]}".to_vec();
        let both = encode(Coding::Brotli, &encode(Coding::Gzip, &text).await).await;
        let body = decoded(response("gzip, br", both))
            .expect("known")
            .into_body()
            .collect()
            .await
            .expect("decoded")
            .to_bytes();
        assert_eq!(body, text);
        let plain = decoded(response("identity", text.clone())).expect("identity");
        assert!(matches!(plain.body(), Decoded::Plain(_)));
        assert_eq!(
            plain.headers()[header::CONTENT_LENGTH],
            "1",
            "an identity response is left as it came"
        );
    }

    #[test]
    fn an_unknown_coding_is_named() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_ENCODING, "gzip, snappy".parse().expect("v"));
        assert!(is_encoded(&headers));
        assert_eq!(codings(&headers), Err("snappy".to_string()));
        headers.insert(header::CONTENT_ENCODING, " Identity ".parse().expect("v"));
        assert!(!is_encoded(&headers));
    }

    #[tokio::test]
    async fn a_zstd_frame_asking_for_a_window_past_8_mib_is_refused() {
        use async_compression::zstd::CParameter;
        let encode_with = |window_log: u32| async move {
            let mut w = ZstdEncoder::with_quality_and_params(
                Vec::new(),
                async_compression::Level::Fastest,
                &[CParameter::window_log(window_log)],
            );
            w.write_all(&[b'a'; 4096]).await.expect("zstd");
            w.shutdown().await.expect("zstd");
            w.into_inner()
        };
        let read = |bytes: Vec<u8>| async move {
            decoded(response("zstd", bytes))
                .expect("known")
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes().len())
        };
        assert_eq!(read(encode_with(23).await).await.ok(), Some(4096));
        assert!(
            read(encode_with(27).await).await.is_err(),
            "a 128 MiB window is no HTTP zstd"
        );
    }

    #[tokio::test]
    async fn corrupt_input_is_an_error_not_a_hang_or_garbage() {
        let body = decoded(response("gzip", b"not gzip at all".to_vec()))
            .expect("known")
            .into_body()
            .collect()
            .await;
        assert!(body.is_err());
    }
}
