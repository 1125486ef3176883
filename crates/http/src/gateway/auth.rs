//! Who may call the gateway: API keys with a role, from a keys file.
//!
//! A key is a random token the caller sends as `Authorization: Bearer
//! TOKEN`. The gateway keeps only each token's SHA-256 (the keys file
//! holds nothing that would let a reader call it), compares digests in
//! constant time, and never logs a token: a request is known by its key's
//! *name*. Each key may carry a rate (a token bucket): beyond it, 429.
//!
//! ```toml
//! [[keys]]
//! name = "checkout"
//! role = "producer"          # producer | operator | analyst
//! sha256 = "<hex SHA-256 of the token>"
//! rate_per_second = 500      # optional; burst defaults to one second's worth
//! burst = 1000               # optional
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tracing::warn;

use super::problem::Problem;

/// Counter: requests refused by a key's rate, by `key`.
pub const RATE_LIMITED_METRIC: &str = "stockledger_gateway_rate_limited_total";
/// What every token starts with, so secret scanners can recognise one.
pub const TOKEN_PREFIX: &str = "slk_";
/// Longest key name: it becomes a metric label and a log field.
const MAX_NAME_LEN: usize = 64;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// An order service: deduct, hold, confirm, rollback; read what a
    /// shop shows its buyers (orders, stock, seat maps, stock events).
    Producer,
    /// Everything, restock, limits and refunds included.
    Operator,
    /// Reading only: orders, stock, seat maps, stock events, and the
    /// archive (history, as-of, reports) and metrics.
    Analyst,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Producer, Role::Operator, Role::Analyst];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Producer => "producer",
            Role::Operator => "operator",
            Role::Analyst => "analyst",
        }
    }

    fn may(self, need: Need) -> bool {
        match need {
            Need::Nothing => true,
            Need::Produce => matches!(self, Role::Producer | Role::Operator),
            Need::Operate => self == Role::Operator,
            Need::ReadLive => true,
            Need::ReadArchive => matches!(self, Role::Operator | Role::Analyst),
        }
    }

    /// The roles that may send `method` to `route` (the router's template,
    /// as the API document names it): the one door policy, which the
    /// gateway enforces and the document states. Empty for an open route.
    ///
    /// ```
    /// use axum::http::Method;
    /// use stockledger_http::gateway::auth::Role;
    ///
    /// let restock = Role::allowed(&Method::POST, "/v1/skus/{sku}/restocks/{adjustment_id}");
    /// assert_eq!(restock, [Role::Operator]);
    /// assert_eq!(Role::allowed(&Method::GET, "/v1/skus/{sku}").len(), 3);
    /// assert!(Role::allowed(&Method::GET, "/healthz").is_empty());
    /// ```
    pub fn allowed(method: &Method, route: &str) -> Vec<Role> {
        match need(method, route) {
            Need::Nothing => Vec::new(),
            need => Role::ALL.into_iter().filter(|r| r.may(need)).collect(),
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a role (producer, operator or analyst)"))
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a route asks of the caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Open to all: liveness, readiness, the API document.
    Nothing,
    /// The commands of an order service.
    Produce,
    /// Restock, transfers, limits, alerts, refunds; and any route not
    /// listed (closed by default).
    Operate,
    /// What a shop shows its buyers, live: an order, a basket, a SKU's
    /// stock, its seat map, stock event streams (every role: the streams
    /// carry the stock too).
    ReadLive,
    /// The archive (history, as-of, reports), metrics, and the console
    /// (the page, the pipeline's status, the sale).
    ReadArchive,
}

/// The role a request on `route` (the router's template) needs.
fn need(method: &Method, route: &str) -> Need {
    match (method.as_str(), route) {
        (_, "/healthz" | "/readyz" | "/openapi.json") => Need::Nothing,
        ("POST", "/v1/skus/{sku}/orders/{order_id}/deduct")
        | ("POST", "/v1/skus/{sku}/orders/{order_id}/rollback")
        | ("POST", "/v1/skus/{sku}/orders/{order_id}/confirm")
        | ("POST", "/v1/baskets/{basket_id}/hold")
        | ("POST", "/v1/baskets/{basket_id}/confirm")
        | ("POST", "/v1/baskets/{basket_id}/release") => Need::Produce,
        (
            "GET" | "HEAD",
            "/v1/skus/{sku}"
            | "/v1/skus/{sku}/orders/{order_id}"
            | "/v1/baskets/{basket_id}"
            | "/v1/skus/{sku}/units"
            | "/v1/skus/{sku}/events"
            | "/v1/events",
        ) => Need::ReadLive,
        (
            "GET" | "HEAD",
            "/v1/skus/{sku}/as-of"
            | "/v1/history"
            | "/v1/report"
            | "/v1/report/locations"
            | "/metrics"
            | "/console"
            | "/v1/status"
            | "/v1/sale",
        ) => Need::ReadArchive,
        _ => Need::Operate,
    }
}

/// The keys file could not be used. Nothing in it is echoed but names.
#[derive(Debug, thiserror::Error)]
pub enum KeysError {
    #[error("reading the keys file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the keys file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("the keys file {path}, key {index} ({name}): field {field} {problem}")]
    Invalid {
        path: PathBuf,
        /// 1-based position of the `[[keys]]` table.
        index: usize,
        name: String,
        field: &'static str,
        problem: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<KeyEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    name: String,
    role: Role,
    sha256: String,
    rate_per_second: Option<f64>,
    burst: Option<f64>,
}

/// One key as the gateway holds it.
struct Key {
    name: Arc<str>,
    role: Role,
    digest: [u8; 32],
    bucket: Option<Mutex<Bucket>>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(rate: f64, burst: f64) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            at: Instant::now(),
        }
    }

    /// Takes one token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

fn parse_keys(path: &Path, text: &str) -> Result<Vec<Key>, KeysError> {
    let file: KeysFile = toml::from_str(text).map_err(|e| KeysError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })?;
    let mut names = HashSet::new();
    let mut digests = HashSet::new();
    let mut keys = Vec::with_capacity(file.keys.len());
    for (i, entry) in file.keys.into_iter().enumerate() {
        let invalid = |field, problem: &str| KeysError::Invalid {
            path: path.to_owned(),
            index: i + 1,
            name: entry.name.clone(),
            field,
            problem: problem.to_owned(),
        };
        if let Err(problem) = check_name(&entry.name) {
            return Err(invalid("name", &problem));
        }
        if !names.insert(entry.name.clone()) {
            return Err(invalid("name", "is used by an earlier key"));
        }
        let mut digest = [0u8; 32];
        if hex::decode_to_slice(entry.sha256.trim(), &mut digest).is_err() {
            return Err(invalid(
                "sha256",
                "must be 64 hexadecimal digits (the SHA-256 of the token, as `stockledger keys new` prints it)",
            ));
        }
        if !digests.insert(digest) {
            return Err(invalid("sha256", "is the same token as an earlier key's"));
        }
        let bucket = match (entry.rate_per_second, entry.burst) {
            (None, None) => None,
            (None, Some(_)) => return Err(invalid("burst", "needs rate_per_second too")),
            (Some(rate), burst) => {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(invalid("rate_per_second", "must be a number above 0"));
                }
                let burst = burst.unwrap_or(rate.max(1.0));
                if !(burst.is_finite() && burst >= 1.0) {
                    return Err(invalid("burst", "must be a number of at least 1"));
                }
                Some(Mutex::new(Bucket::new(rate, burst)))
            }
        };
        keys.push(Key {
            name: entry.name.into(),
            role: entry.role,
            digest,
            bucket,
        });
    }
    Ok(keys)
}

/// A key's name: 1 to 64 of `A-Z a-z 0-9 . _ -` (it is a metric label and
/// a log field).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("must be 1 to {MAX_NAME_LEN} characters long"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "may hold only letters, digits, '.', '_' and '-', not {c:?}"
        ));
    }
    Ok(())
}

/// A fresh token and the hex SHA-256 the keys file holds for it.
pub fn new_token() -> (String, String) {
    let mut secret = [0u8; 32];
    // ThreadRng: ChaCha12, seeded and reseeded from the OS (a CryptoRng).
    rand::rng().fill_bytes(&mut secret);
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
    let digest = hex::encode(Sha256::digest(token.as_bytes()));
    (token, digest)
}

/// The keys the gateway accepts, re-read from their file on demand (the
/// CLI does so on SIGHUP). Cheap to clone; clones share the keys.
#[derive(Clone)]
pub struct ApiKeys {
    path: PathBuf,
    keys: Arc<RwLock<Arc<Vec<Key>>>>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("path", &self.path)
            .field("keys", &self.current().len())
            .finish()
    }
}

impl ApiKeys {
    /// Reads `path`; refuses a file with any bad key.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, KeysError> {
        let path = path.into();
        let keys = Self::read(&path)?;
        Ok(Self {
            path,
            keys: Arc::new(RwLock::new(Arc::new(keys))),
        })
    }

    /// Re-reads the file; on any error the keys in use stay. Returns how
    /// many keys are now accepted.
    pub fn reload(&self) -> Result<usize, KeysError> {
        let keys = Arc::new(Self::read(&self.path)?);
        let count = keys.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
        Ok(count)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many keys are accepted.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    fn read(path: &Path) -> Result<Vec<Key>, KeysError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeysError::Read {
            path: path.to_owned(),
            source,
        })?;
        parse_keys(path, &text)
    }

    fn current(&self) -> Arc<Vec<Key>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Finds the key whose digest is the token's, looking at every key so the
/// time taken does not depend on which (if any) matched.
fn find<'k>(keys: &'k [Key], token: &str) -> Option<&'k Key> {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let mut found = None;
    for key in keys {
        if bool::from(key.digest.ct_eq(&digest)) {
            found = Some(key);
        }
    }
    found
}

/// The name of the key a request came with, left on the response for the
/// access log and the request metrics.
#[derive(Debug, Clone)]
pub struct KeyName(pub Arc<str>);

/// Whether `route` is the console or a read it polls: opened by a
/// browser, which can only ask its user for a name and a password, so the
/// key may come as a Basic password too.
pub fn console_route(route: &str) -> bool {
    matches!(route, "/console" | "/v1/status" | "/v1/sale")
}

/// The key of an `Authorization` header: `Bearer TOKEN`; or, where
/// `basic` allows, `Basic` with the token as the password (any user
/// name), which is what a browser sends once its user has logged in to
/// the console.
fn token(request: &Request, basic: bool) -> Option<String> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, credentials) = value.split_once(' ')?;
    let credentials = credentials.trim();
    let token = if scheme.eq_ignore_ascii_case("bearer") {
        credentials.to_owned()
    } else if basic && scheme.eq_ignore_ascii_case("basic") {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        decoded.split_once(':')?.1.to_owned()
    } else {
        return None;
    };
    (!token.is_empty()).then_some(token)
}

/// The `WWW-Authenticate` challenge of a 401 on `route` (`unknown`: a key
/// was sent and is not known): Basic on the console's routes, so that a
/// browser asks for the key.
fn challenge(route: &str, unknown: bool) -> &'static str {
    match (console_route(route), unknown) {
        (true, _) => "Basic realm=\"stockledger\", charset=\"UTF-8\"",
        (false, false) => "Bearer realm=\"stockledger\"",
        (false, true) => "Bearer realm=\"stockledger\", error=\"invalid_token\"",
    }
}

fn unauthorized(detail: &str, challenge: &'static str) -> Response {
    let mut response = Problem::new(StatusCode::UNAUTHORIZED, detail.to_owned()).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// Middleware: lets a request through if its key's role may use the
/// route and its rate allows; 401, 403 or 429 otherwise.
pub async fn authorize(State(keys): State<ApiKeys>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("", |p| p.as_str());
    let need = need(request.method(), route);
    if need == Need::Nothing {
        return next.run(request).await;
    }
    if request
        .headers()
        .get_all(header::AUTHORIZATION)
        .iter()
        .count()
        > 1
    {
        // Which one a proxy or the gateway would take is a guess; refused
        // rather than let the first (or last) win.
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "the request has more than one Authorization header; send one".to_owned(),
        )
        .into_response();
    }
    let current = keys.current();
    let Some(token) = token(&request, console_route(route)) else {
        return unauthorized(
            "this route needs an API key: send Authorization: Bearer TOKEN",
            challenge(route, false),
        );
    };
    let Some(key) = find(&current, &token) else {
        warn!(target: "stockledger_http::access", method = %request.method(), route,
            "refused a request with an unknown API key");
        return unauthorized(
            "the API key is not known (it may have been removed)",
            challenge(route, true),
        );
    };
    let name = KeyName(key.name.clone());
    let mut response = if !key.role.may(need) {
        warn!(target: "stockledger_http::access", key = %key.name, role = %key.role,
            method = %request.method(), route, "refused: the key's role may not");
        Problem::new(
            StatusCode::FORBIDDEN,
            format!(
                "the key {} ({} role) may not {} {}",
                key.name,
                key.role,
                request.method(),
                route
            ),
        )
        .into_response()
    } else if let Some(wait) = key.bucket.as_ref().and_then(|bucket| {
        bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now())
            .err()
    }) {
        metrics::counter!(RATE_LIMITED_METRIC, "key" => key.name.to_string()).increment(1);
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        Problem::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("the key {} is over its rate; try again later", key.name),
        )
        .retry_after(seconds)
        .into_response()
    } else {
        drop(current);
        // The handlers that count what a key holds (event streams) read it.
        let mut request = request;
        request.extensions_mut().insert(name.clone());
        next.run(request).await
    };
    response.extensions_mut().insert(name);
    response
}

/// Registers the rate-limit counter of every key at zero, so a dashboard
/// shows each key before its first refusal.
pub fn describe(keys: &ApiKeys) {
    metrics::describe_counter!(
        RATE_LIMITED_METRIC,
        "Requests refused with 429 because their API key was over its rate, by key."
    );
    for key in keys.current().iter() {
        metrics::counter!(RATE_LIMITED_METRIC, "key" => key.name.to_string()).absolute(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &str) -> Result<Vec<Key>, KeysError> {
        parse_keys(Path::new("keys.toml"), entries)
    }

    #[test]
    fn a_token_is_found_by_its_digest_and_only_by_it() {
        let (token, digest) = new_token();
        assert!(token.starts_with(TOKEN_PREFIX) && token.len() == TOKEN_PREFIX.len() + 64);
        let (other, other_digest) = new_token();
        let keys = file(&format!(
            "[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"{digest}\"\n\
             [[keys]]\nname = \"b\"\nrole = \"analyst\"\nsha256 = \"{other_digest}\"\n"
        ))
        .unwrap();
        assert_eq!(&*find(&keys, &token).unwrap().name, "a");
        assert_eq!(&*find(&keys, &other).unwrap().name, "b");
        assert!(find(&keys, &digest).is_none());
        assert!(find(&keys, &token[..token.len() - 1]).is_none());
    }

    #[test]
    fn each_role_may_what_it_is_for_and_nothing_else() {
        let post = |route| need(&Method::POST, route);
        let get = |route| need(&Method::GET, route);
        let cases = [
            (
                post("/v1/skus/{sku}/orders/{order_id}/deduct"),
                [true, true, false],
            ),
            (
                post("/v1/skus/{sku}/orders/{order_id}/confirm"),
                [true, true, false],
            ),
            (
                post("/v1/skus/{sku}/orders/{order_id}/rollback"),
                [true, true, false],
            ),
            (
                post("/v1/skus/{sku}/orders/{order_id}/refund"),
                [false, true, false],
            ),
            (
                post("/v1/skus/{sku}/restocks/{adjustment_id}"),
                [false, true, false],
            ),
            (
                post("/v1/skus/{sku}/transfers/{transfer_id}"),
                [false, true, false],
            ),
            (
                need(&Method::PUT, "/v1/skus/{sku}/limit"),
                [false, true, false],
            ),
            (
                need(&Method::PUT, "/v1/skus/{sku}/alerts"),
                [false, true, false],
            ),
            (get("/v1/skus/{sku}/orders/{order_id}"), [true, true, true]),
            (get("/v1/skus/{sku}/events"), [true, true, true]),
            (get("/v1/events"), [true, true, true]),
            (get("/v1/skus/{sku}"), [true, true, true]),
            (get("/v1/history"), [false, true, true]),
            (get("/v1/report"), [false, true, true]),
            (get("/v1/report/locations"), [false, true, true]),
            (get("/v1/skus/{sku}/as-of"), [false, true, true]),
            (get("/metrics"), [false, true, true]),
            (get("/readyz"), [true, true, true]),
            // A route nobody listed is for operators only.
            (post("/v1/skus/{sku}/something-new"), [false, true, false]),
        ];
        for (need, allowed) in cases {
            let got = Role::ALL.map(|role| role.may(need));
            assert_eq!(got, allowed, "{need:?}");
        }
    }

    #[test]
    fn every_documented_route_has_its_rule() {
        use utoipa::OpenApi;
        let document = super::super::ApiDoc::openapi();
        for (path, item) in &document.paths.paths {
            let methods = [
                (Method::GET, item.get.is_some()),
                (Method::POST, item.post.is_some()),
                (Method::PUT, item.put.is_some()),
            ];
            for (method, present) in methods {
                if present {
                    let need = need(&method, path);
                    let operator_only = path.contains("/restocks/")
                        || path.contains("/transfers/")
                        || path.ends_with("/refund")
                        || path.ends_with("/limit")
                        || path.ends_with("/alerts")
                        || path.contains("/windows/")
                        || path.contains("/pauses/")
                        || path.contains("/resumes/");
                    assert!(
                        need != Need::Operate || operator_only,
                        "{method} {path} falls to the operators-only default"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_keys_are_refused_naming_the_key_and_the_field() {
        let (_, digest) = new_token();
        let cases = [
            (format!("[[keys]]\nname = \"\"\nrole = \"producer\"\nsha256 = \"{digest}\""), "field name"),
            (format!("[[keys]]\nname = \"a b\"\nrole = \"producer\"\nsha256 = \"{digest}\""), "field name"),
            ("[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"zz\"".to_owned(), "field sha256"),
            (format!("[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"{digest}\"\n[[keys]]\nname = \"a\"\nrole = \"analyst\"\nsha256 = \"{}\"", new_token().1), "earlier key"),
            (format!("[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"{digest}\"\n[[keys]]\nname = \"b\"\nrole = \"analyst\"\nsha256 = \"{digest}\""), "same token"),
            (format!("[[keys]]\nname = \"a\"\nrole = \"admin\"\nsha256 = \"{digest}\""), "role"),
            (format!("[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"{digest}\"\nrate_per_second = 0"), "field rate_per_second"),
            (format!("[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"{digest}\"\nburst = 5"), "field burst"),
            (format!("[[keys]]\nname = \"a\"\nrole = \"producer\"\nsha256 = \"{digest}\"\ntoken = \"x\""), "token"),
        ];
        for (text, expected) in cases {
            let error = file(&text).map(|_| ()).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}\n→ {error}");
        }
        assert_eq!(file("").unwrap().len(), 0);
    }

    #[test]
    fn a_bucket_lets_its_burst_through_then_its_rate() {
        let start = Instant::now();
        let mut bucket = Bucket {
            rate: 2.0,
            burst: 3.0,
            tokens: 3.0,
            at: start,
        };
        for _ in 0..3 {
            assert_eq!(bucket.take(start), Ok(()));
        }
        let wait = bucket.take(start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert_eq!(bucket.take(start + Duration::from_millis(500)), Ok(()));
        assert!(bucket.take(start + Duration::from_millis(500)).is_err());
        // Ten idle seconds save up no more than the burst.
        let later = start + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(bucket.take(later), Ok(()));
        }
        assert!(bucket.take(later).is_err());
    }

    #[test]
    fn a_bearer_token_or_on_the_console_a_basic_password_is_the_key() {
        let with = |value: &str| {
            let request = Request::builder()
                .header(header::AUTHORIZATION, value)
                .body(axum::body::Body::empty())
                .unwrap();
            let bearer_only = token(&request, false);
            let basic_too = token(&request, true);
            if value.to_lowercase().starts_with("basic") {
                assert_eq!(bearer_only, None, "Basic off the console: {value}");
            } else {
                assert_eq!(bearer_only, basic_too, "{value}");
            }
            basic_too
        };
        assert_eq!(with("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(with("bearer  abc ").as_deref(), Some("abc"));
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer"), None);
        // "anyone:abc", and a password holding a colon.
        assert_eq!(with("Basic YW55b25lOmFiYw==").as_deref(), Some("abc"));
        assert_eq!(with("basic YTpiOmM=").as_deref(), Some("b:c"));
        // No password, no colon, not base64, another scheme.
        assert_eq!(with("Basic YW55b25lOg=="), None);
        assert_eq!(with("Basic YWJj"), None);
        assert_eq!(with("Basic abc!"), None);
        assert_eq!(with("Digest abc"), None);
    }

    #[test]
    fn debug_shows_names_never_digests() {
        let (_, digest) = new_token();
        let keys = file(&format!(
            "[[keys]]\nname = \"checkout\"\nrole = \"producer\"\nsha256 = \"{digest}\""
        ))
        .unwrap();
        let shown = format!("{:?}", keys[0]);
        assert!(shown.contains("checkout") && !shown.contains(&digest[..16]));
    }
}
