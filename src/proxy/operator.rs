//! The operator API under `/toolstub/v1/` (SPEC section 8): list, read,
//! search within a ref, and session-wide search, as JSON. The tenant comes
//! from the request's credential exactly as on the proxied API, so another
//! tenant's ref answers 404 exactly like a missing one.

use super::error::ProxyError;
use super::{App, BoxBody};
use http::{Request, Response};
use hyper::body::Incoming;
use std::sync::Arc;

pub(super) async fn handle(
    _app: &Arc<App>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, ProxyError> {
    Err(ProxyError::NotFound(format!(
        "no operator endpoint at {}",
        req.uri().path()
    )))
}
