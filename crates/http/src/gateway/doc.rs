//! The OpenAPI document of the gateway ([`ApiDoc`]): its routes, the
//! door every route shares (the bearer key, the roles that may use each
//! route, the answers of the door), and the rules a JSON Schema states
//! (`contract`). Served at `/openapi.json`, checked in as
//! `docs/openapi.json`.

use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder, Server};
use utoipa::OpenApi;

use super::contract::Rules;
use super::{analysts, auth, baskets, commands, console, events, problem, reads, sale};
use crate::observe;

/// The OpenAPI document of the gateway.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "stockledger gateway",
        description = "Commands (deduct, rollback, restock, transfer, limits, low-stock alerts, sale windows and pauses) and reads (stock, per location too, one order; from the archive: history, stock as of a past moment, per-interval reports) of the stock ledger over HTTP. The order id (restocks: the adjustment id; transfers: the transfer id; windows, pauses and resumes: the change id) in the path is the idempotency key. Errors are application/problem+json naming the field. With `serve --api-keys`, every route but the probes and this document needs a bearer key whose role (producer, operator, analyst) may use it: each operation's security requirement lists the roles that may."
    ),
    paths(
        commands::deduct,
        commands::rollback,
        commands::confirm,
        commands::refund,
        commands::limit,
        commands::alerts,
        commands::restock,
        commands::transfer,
        sale::window,
        sale::pause,
        sale::resume,
        baskets::hold,
        baskets::confirm,
        baskets::release,
        baskets::show,
        reads::stock,
        reads::units,
        reads::order,
        reads::history,
        events::sku_events,
        events::events,
        analysts::as_of,
        analysts::report,
        analysts::report_by_location,
        console::status,
        console::sale,
        console::page,
        observe::healthz,
        observe::readyz_doc
    ),
    components(schemas(events::StockEventBody, events::StockSnapshot)),
    modifiers(&Doors, &Rules),
    tags(
        (name = "commands", description = "Append a command to the log; optionally wait for its decision"),
        (name = "baskets", description = "Several SKUs held, confirmed or released together, all or none; each waits for every line's decision"),
        (name = "reads", description = "The Redis projection and the PostgreSQL archive"),
        (name = "operations", description = "Liveness and readiness (metrics at /metrics, in the Prometheus text format)")
    )
)]
#[derive(Debug)]
pub struct ApiDoc;

/// Adds to the document what every route shares: the bearer key scheme
/// (`serve --api-keys`) and, on the console's routes, the same key as a
/// Basic password, with the roles that may use each route
/// ([`auth::Role::allowed`], as OpenAPI 3.1 lets a requirement list roles),
/// the answers of the door (400 for two keys, 401, 403, 429 of a key over
/// its rate) and the default server. The probes and the document itself
/// are open.
struct Doors;

/// The name of the bearer key scheme.
const SCHEME: &str = "api_key";
/// The name of the scheme of the key as a Basic password.
const BASIC_SCHEME: &str = "api_key_basic";

impl utoipa::Modify for Doors {
    fn modify(&self, document: &mut utoipa::openapi::OpenApi) {
        let components = document.components.get_or_insert_with(Default::default);
        let mut bearer = Http::new(HttpAuthScheme::Bearer);
        bearer.description = Some(
            "A token from `stockledger keys new`, when the gateway runs with --api-keys".into(),
        );
        components.add_security_scheme(SCHEME, SecurityScheme::Http(bearer));
        let mut basic = Http::new(HttpAuthScheme::Basic);
        basic.description = Some(
            "On the console's routes (/console, /v1/status, /v1/sale), the same key as the \
             password, with any user name: what a browser sends once its user has logged in"
                .into(),
        );
        components.add_security_scheme(BASIC_SCHEME, SecurityScheme::Http(basic));
        document.servers = Some(vec![Server::builder()
            .url("http://127.0.0.1:8080")
            .description(Some("stockledger serve with its default --listen"))
            .build()]);
        for (path, item) in document.paths.paths.iter_mut() {
            let open = matches!(path.as_str(), "/healthz" | "/readyz" | "/openapi.json");
            let operations = [
                (axum::http::Method::GET, &mut item.get),
                (axum::http::Method::POST, &mut item.post),
                (axum::http::Method::PUT, &mut item.put),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation else { continue };
                optional_body_is_an_object(operation);
                if open {
                    operation.security = Some(vec![SecurityRequirement::default()]);
                    continue;
                }
                let roles = auth::Role::allowed(&method, path);
                let names: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
                let mut requirements = vec![SecurityRequirement::new(SCHEME, names.clone())];
                if auth::console_route(path) {
                    requirements.push(SecurityRequirement::new(BASIC_SCHEME, names.clone()));
                }
                operation.security = Some(requirements);
                door_answers(operation, &names);
            }
        }
    }
}

/// An optional body (`content = Option<T>`) is absent or `T`: utoipa
/// writes it as `null` or `T`, but the gateway refuses a `null` body as
/// any other body that is not an object ([`problem::Body::optional`]).
fn optional_body_is_an_object(operation: &mut Operation) {
    use utoipa::openapi::schema::{Schema, SchemaType, Type};
    let Some(body) = &mut operation.request_body else {
        return;
    };
    for content in body.content.values_mut() {
        let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema else {
            continue;
        };
        let is_null = |item: &RefOr<Schema>| matches!(item, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
        let kept: Vec<&RefOr<Schema>> = one_of.items.iter().filter(|i| !is_null(i)).collect();
        if let [only] = kept[..] {
            content.schema = Some(only.clone());
        }
    }
}

/// A problem+json answer described as `description`.
fn problem(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            problem::PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
}

/// The answers any keyed route may give besides its own: the body's
/// refusals (for a route that takes one), 503, and the door's 400 (two
/// keys), 401, 403 (naming the roles that may) and 429.
fn door_answers(operation: &mut Operation, roles: &[&str]) {
    let takes_body = operation.request_body.is_some();
    let responses = &mut operation.responses.responses;
    let mut unless_listed = |status: &str, description: &str| {
        responses
            .entry(status.to_owned())
            .or_insert_with(|| problem(description).into());
    };
    if takes_body {
        unless_listed("400", "The body is not well-formed JSON");
        unless_listed("408", "The body did not arrive within --read-timeout-ms");
        unless_listed("413", "The body is over 16 KiB");
        unless_listed(
            "415",
            "A body that is not sent as Content-Type: application/json",
        );
    }
    unless_listed(
        "503",
        "A service the route needs (the brokers, Redis or PostgreSQL) does not answer; retry after Retry-After",
    );
    responses.insert(
        "401".into(),
        problem("No API key, or one that is not known; WWW-Authenticate says which").into(),
    );
    let refused = format!(
        "The key's role may not use this route (only {} may)",
        roles.join(", ")
    );
    responses.insert("403".into(), problem(&refused).into());
    let mut also = |status: &str, more: &str, alone: &str| match responses.get_mut(status) {
        Some(RefOr::T(listed)) => listed.description.push_str(more),
        _ => {
            responses.insert(status.into(), problem(alone).into());
        }
    };
    also(
        "429",
        ", or the API key is over its rate",
        "The API key is over its rate; retry after Retry-After",
    );
    also(
        "400",
        "; or more than one Authorization header",
        "More than one Authorization header",
    );
}

/// The OpenAPI document as served and checked in.
pub fn openapi_json() -> String {
    let mut text = ApiDoc::openapi().to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}
