//! What the gateway checks of every request before a route sees it, and
//! what every answer carries, whatever route gave it.
//!
//! - A request that can change the ledger (any method but `GET`, `HEAD` and
//!   `OPTIONS`) from a browser page of another origin than the gateway's
//!   own or one allowed with `--cors-origin` is refused with 403. Browsers
//!   send such a "simple request" (no body, or `text/plain`) without asking
//!   first, so CORS alone does not stop a page elsewhere from pausing a sale
//!   on a gateway without keys; the `Origin` header they always add does.
//! - A query string that is not UTF-8 once percent-decoded is refused with
//!   400, as a path is: decoded lossily, `sku=%FF` would name another SKU.
//! - Every answer says `Cache-Control: no-store` (stock and orders change
//!   from one instant to the next, and answers may carry what a key may
//!   read) unless it says otherwise, and `X-Content-Type-Options: nosniff`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;

/// Middleware: refuses a cross-origin request that could change the
/// ledger; marks every answer not to be cached or sniffed.
pub(crate) async fn harden(
    State(allowed): State<Arc<[String]>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(origin) = foreign_origin(&request, &allowed) {
        return Problem::new(
            StatusCode::FORBIDDEN,
            format!(
                "a {} from a page of {origin} is refused: only the gateway's own pages and origins \
                 allowed with serve --cors-origin may change the ledger",
                request.method()
            ),
        )
        .into_response();
    }
    if request.uri().query().is_some_and(|q| !decodes_to_utf8(q)) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "the query string is not UTF-8 once percent-decoded",
        )
        .into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// Whether `query`, percent-decoded, is UTF-8 (the form decoder every
/// route uses decodes lossily).
fn decodes_to_utf8(query: &str) -> bool {
    percent_encoding::percent_decode_str(query)
        .decode_utf8()
        .is_ok()
}

/// The `Origin` of `request` when it is a write from a page that is
/// neither the gateway's own origin nor one of `allowed`.
fn foreign_origin(request: &Request, allowed: &[String]) -> Option<String> {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return None;
    }
    let origin = request.headers().get(header::ORIGIN)?;
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    if allowed.iter().any(|a| a.eq_ignore_ascii_case(&origin)) {
        return None;
    }
    // The host the page was served from: as a proxy in front says it
    // (a page elsewhere cannot set X-Forwarded-Host without a preflight,
    // which CORS refuses), else as the request says it.
    let headers = request.headers();
    let text = |name| {
        headers
            .get(name)
            .and_then(|h: &HeaderValue| h.to_str().ok())
    };
    let hosts = [
        text(HeaderName::from_static("x-forwarded-host")),
        text(header::HOST),
        request.uri().authority().map(|a| a.as_str()),
    ];
    let own = hosts.into_iter().flatten().any(|host| {
        ["http://", "https://"].iter().any(|scheme| {
            origin
                .strip_prefix(scheme)
                .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
        })
    });
    (!own).then_some(origin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(method: &str, origin: Option<&str>) -> Request {
        let mut builder = Request::builder()
            .method(method)
            .uri("/v1/skus/A/pauses/p1")
            .header(header::HOST, "127.0.0.1:8080");
        if let Some(origin) = origin {
            builder = builder.header(header::ORIGIN, origin);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn a_query_is_utf8_only_if_its_decoded_bytes_are() {
        assert!(decodes_to_utf8("sku=SKU-1&levels=true"));
        assert!(decodes_to_utf8("sku=caf%C3%A9+cr%C3%A8me"));
        assert!(decodes_to_utf8("sku=100%25&odd=%zz"));
        assert!(!decodes_to_utf8("sku=%FF"));
        assert!(!decodes_to_utf8("sku=caf%C3"));
    }

    #[test]
    fn only_writes_from_a_foreign_page_are_refused() {
        let allowed = ["https://shop.example.com".to_owned()];
        let foreign = |method, origin| foreign_origin(&request(method, origin), &allowed);
        assert_eq!(
            foreign("POST", Some("https://evil.example")).as_deref(),
            Some("https://evil.example")
        );
        assert_eq!(foreign("PUT", Some("null")).as_deref(), Some("null"));
        assert_eq!(foreign("POST", Some("https://shop.example.com")), None);
        assert_eq!(
            foreign("POST", Some("http://127.0.0.1:8080")),
            None,
            "the console's own"
        );
        assert_eq!(foreign("POST", None), None, "not a browser");
        assert_eq!(foreign("GET", Some("https://evil.example")), None);
        let mut proxied = request("POST", Some("https://shop.example.org"));
        proxied.headers_mut().insert(
            "x-forwarded-host",
            HeaderValue::from_static("shop.example.org"),
        );
        assert_eq!(foreign_origin(&proxied, &allowed), None, "behind a proxy");
    }
}
