//! Errors as `application/problem+json` (RFC 9457), and the extractors
//! that turn bad input into one naming the field.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;
use stockledger_analysts::query::QueryError;
use stockledger_core::report::Chain;
use stockledger_core::ValidationError;
use tracing::warn;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error answer: what went wrong, and for bad input which field.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A short, stable summary of the kind of problem.
    pub title: String,
    /// The HTTP status, repeated in the body.
    pub status: u16,
    /// What exactly was wrong with this request.
    pub detail: String,
    /// The request field at fault (JSON path, path parameter or query
    /// parameter), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Seconds after which repeating the request may succeed (also sent as
    /// `Retry-After`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: detail.into(),
            field: None,
            retry_after_s: None,
        }
    }

    /// 422: `field` holds a value the ledger refuses.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: Some(field.into()),
            ..Self::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
        }
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_s = Some(seconds);
        self
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl From<ValidationError> for Problem {
    fn from(e: ValidationError) -> Self {
        Self::invalid(e.field, e.to_string())
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = self.retry_after_s;
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A JSON body of type `T`: refused with 415 (not JSON), 413 (over the
/// body limit), 408 (not sent in time), 400 (not well-formed JSON) or 422
/// naming the field (a wrong type, a missing or unknown field). An empty
/// body reads as `T::default()` where `T` allows it ([`Body::optional`]).
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> Body<T> {
    fn parse(bytes: &[u8]) -> Result<T, Problem> {
        let bytes = &integral_numbers(bytes)[..];
        // serde reads a struct from an array by position too; every body
        // is an object, and the docs promise nothing else gets in.
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first.is_some_and(|&b| b != b'{')
            && serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
        {
            return Err(Problem::invalid(
                "body".to_owned(),
                "the body must be a JSON object".to_owned(),
            ));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            match inner.classify() {
                serde_json::error::Category::Data => {
                    let message = inner.to_string();
                    let field = unknown_field(&message)
                        .or_else(|| missing_field(&message, &path))
                        .unwrap_or(if path == "." { "body".to_owned() } else { path });
                    Problem::invalid(field, message)
                }
                _ => Problem::new(
                    StatusCode::BAD_REQUEST,
                    format!("the body is not well-formed JSON: {inner}"),
                ),
            }
        })?;
        deserializer.end().map_err(|e| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                format!("the body has more after its JSON value: {e}"),
            )
        })?;
        Ok(value)
    }

    /// Reads an optional body: absent or empty gives `T::default()`; `null`
    /// is refused as any other body that is not an object.
    pub async fn optional<S: Send + Sync>(req: Request, state: &S) -> Result<T, Problem>
    where
        T: Default,
    {
        let bytes = read_body(req, state).await?;
        // No body is the request with every field left out.
        if bytes.trim_ascii().is_empty() {
            return Ok(T::default());
        }
        Self::parse(&bytes)
    }
}

/// A route that takes no fields: an empty body, or `{}`; anything else
/// is refused as every body is (413, 415, 400, 422).
pub(crate) async fn no_body(request: Request) -> Result<(), Problem> {
    let _: NoFields = Body::optional(request, &()).await?;
    Ok(())
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

/// `bytes` (JSON) with each number written with a fraction of zeros alone
/// (`99.0`) written as the integer it is (`99`): JSON Schema calls it an
/// integer, and clients that hold numbers as floats (Python's `json`, most
/// JavaScript) send it so, where serde reads an `i64` only from digits.
/// Text inside strings is left alone; so is anything else that is not an
/// integer. Written here because serde_json has no such option.
fn integral_numbers(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut in_string, mut escaped) = (0, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            (in_string, escaped) = match (escaped, b) {
                (true, _) => (true, false),
                (false, b'\\') => (true, true),
                (false, b'"') => (false, false),
                _ => (true, false),
            };
        } else if b == b'"' {
            in_string = true;
        } else if b.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let zeros = bytes[i..]
                .iter()
                .skip(1)
                .take_while(|&&z| z == b'0')
                .count();
            let after = i + 1 + zeros;
            let ends = |at: usize| !matches!(bytes.get(at), Some(b'0'..=b'9' | b'e' | b'E' | b'.'));
            if bytes.get(i) == Some(&b'.') && zeros > 0 && ends(after) {
                let kept = out.get_or_insert_with(|| bytes[..start].to_vec());
                kept.extend_from_slice(&bytes[start..i]);
                i = after;
                continue;
            }
            if let Some(kept) = &mut out {
                kept.extend_from_slice(&bytes[start..i]);
            }
            continue;
        }
        if let Some(kept) = &mut out {
            kept.push(b);
        }
        i += 1;
    }
    match out {
        Some(kept) => std::borrow::Cow::Owned(kept),
        None => std::borrow::Cow::Borrowed(bytes),
    }
}

/// The name in serde's "unknown field `x`, expected …" message: the field
/// at fault is the unknown one, not its parent.
fn unknown_field(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("unknown field `")
        .or_else(|| message.strip_prefix("duplicate field `"))?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// The field serde's "missing field `x`" names, under the object at `path`
/// (`.` is the body itself).
fn missing_field(message: &str, path: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    let name = &rest[..rest.find('`')?];
    Some(match path {
        "." => name.to_owned(),
        parent => format!("{parent}.{name}"),
    })
}

/// How long a request's whole body may take to arrive (`serve
/// --read-timeout-ms`), left on each request by the router. The body layer
/// bounds each wait between two chunks only, so a body trickled a byte at a
/// time would otherwise hold its connection until the request's own
/// timeout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyDeadline(pub(crate) std::time::Duration);

async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Problem> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let deadline = req
        .extensions()
        .get::<BodyDeadline>()
        .map_or(std::time::Duration::from_secs(10), |d| d.0);
    let bytes = tokio::time::timeout(deadline, Bytes::from_request(req, state))
        .await
        .map_err(|_| {
            Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                format!("the body did not arrive within {} ms", deadline.as_millis()),
            )
        })?
        .map_err(body_rejection)?;
    if !bytes.is_empty() {
        let is_json = content_type.as_deref().is_some_and(|t| {
            let essence = t.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
        });
        if !is_json {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the body must be JSON, sent with Content-Type: application/json",
            ));
        }
    }
    Ok(bytes)
}

fn body_rejection(rejection: BytesRejection) -> Problem {
    let status = rejection.status();
    let detail = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!(
            "the body is larger than the {} bytes a request may carry",
            super::MAX_BODY_BYTES
        ),
        _ if is_timeout(&rejection) => {
            return Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "the body was not received in time",
            )
        }
        _ => rejection.body_text(),
    };
    Problem::new(status, detail)
}

fn is_timeout(rejection: &BytesRejection) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(e) = source {
        if e.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = e.source();
    }
    false
}

impl<S, T> FromRequest<S> for Body<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(req, state).await?;
        if bytes.is_empty() {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "the request needs a JSON body",
            ));
        }
        Self::parse(&bytes).map(Body)
    }
}

/// The query of a route that takes no parameter: any is refused with 422
/// naming it, so that a misspelt or misplaced one (`?wait_ms=` on a basket)
/// is not silently ignored.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Query parameters of type `T`; a bad one is refused with 422 naming it.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or("");
        let deserializer =
            serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(deserializer)
            .map(Query)
            .map_err(|e| {
                let path = e.path().to_string();
                let message = e.inner().to_string();
                let field = unknown_field(&message).unwrap_or(path);
                Problem::invalid(field, format!("query: {message}"))
            })
    }
}

pub(super) fn path_problem(rejection: PathRejection) -> Problem {
    Problem::new(StatusCode::BAD_REQUEST, rejection.body_text())
}

/// A refused question (`422` naming the parameter), or an unreachable
/// archive (`503`).
pub(super) fn archive_problem(e: QueryError) -> Problem {
    match e {
        QueryError::Invalid { field, problem } => Problem::invalid(field, problem),
        QueryError::Database(e) => {
            warn!(error = %Chain(&e), "reading the archive failed");
            Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the archive could not be read: {}", Chain(&e)),
            )
            .retry_after(1)
        }
    }
}

pub(super) fn redis_problem(e: &dyn std::error::Error) -> Problem {
    warn!(error = %Chain(e), "reading the Redis projection failed");
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the stock projection (Redis) could not be read: {}",
            Chain(e)
        ),
    )
    .retry_after(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn integral(text: &str) -> String {
        String::from_utf8(integral_numbers(text.as_bytes()).into_owned()).unwrap_or_default()
    }

    #[test]
    fn numbers_with_a_fraction_of_zeros_read_as_integers_and_nothing_else_changes() {
        assert_eq!(
            integral(r#"{"per_user": 20590.0}"#),
            r#"{"per_user": 20590}"#
        );
        assert_eq!(
            integral(r#"[1.00,-2.0,3.5,4.0e1,0.0]"#),
            r#"[1,-2,3.5,4.0e1,0]"#
        );
        assert_eq!(
            integral(r#"{"reason": "1.0 \"2.0\"", "q": 7.0}"#),
            r#"{"reason": "1.0 \"2.0\"", "q": 7}"#
        );
        let untouched = r#"{"quantity": 3, "user_id": "u.1"}"#;
        assert!(matches!(
            integral_numbers(untouched.as_bytes()),
            std::borrow::Cow::Borrowed(_)
        ));
        #[derive(Debug, serde::Deserialize, PartialEq)]
        struct Limit {
            per_user: i64,
        }
        let read: Limit =
            Body::<Limit>::parse(br#"{"per_user": 99.0}"#).unwrap_or(Limit { per_user: 0 });
        assert_eq!(read, Limit { per_user: 99 });
        assert!(Body::<Limit>::parse(br#"{"per_user": 99.5}"#).is_err());
    }
}
