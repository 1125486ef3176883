//! What the shipped monitoring queries: every PromQL expression of the
//! alerting rules (`deploy/prometheus/alerts.yml`) and of the Grafana
//! dashboard (`deploy/grafana/dashboards/stockledger.json`), parsed with a
//! PromQL parser, and the metric names each selects. Grafana cannot run
//! here, so this is how a panel or an alert that names a metric no service
//! exports is caught.

use std::collections::BTreeSet;

use promql_parser::parser::{self, Expr};
use yaml_rust2::YamlLoader;

const ALERTS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/prometheus/alerts.yml"
);
const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/grafana/dashboards/stockledger.json"
);

/// Every query of the alerts and the dashboard: (where it is, the query).
pub fn queries() -> anyhow::Result<Vec<(String, String)>> {
    let mut queries = Vec::new();
    let alerts = YamlLoader::load_from_str(&std::fs::read_to_string(ALERTS)?)?;
    for group in alerts
        .iter()
        .flat_map(|doc| doc["groups"].as_vec().into_iter().flatten())
    {
        for rule in group["rules"].as_vec().into_iter().flatten() {
            let name = rule["alert"].as_str().unwrap_or("a rule");
            let expr = rule["expr"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("alert {name} has no expr"))?;
            queries.push((format!("alert {name}"), expr.to_owned()));
        }
    }
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD)?)?;
    let mut panels: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        // A row holds its panels.
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        let title = panel["title"].as_str().unwrap_or("a panel");
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push((format!("panel {title:?}"), expr.to_owned()));
            }
        }
    }
    anyhow::ensure!(
        !queries.is_empty(),
        "no query found in {ALERTS} or {DASHBOARD}"
    );
    Ok(queries)
}

/// The metric names `query` selects, by its syntax tree.
pub fn selected(query: &str) -> anyhow::Result<BTreeSet<String>> {
    let expr = parser::parse(query).map_err(|e| anyhow::anyhow!("{query}: {e}"))?;
    let mut names = BTreeSet::new();
    let mut todo = vec![&expr];
    while let Some(expr) = todo.pop() {
        match expr {
            Expr::VectorSelector(v) => names.extend(v.name.clone()),
            Expr::MatrixSelector(m) => names.extend(m.vs.name.clone()),
            Expr::Aggregate(a) => {
                todo.push(&a.expr);
                todo.extend(a.param.as_deref());
            }
            Expr::Unary(u) => todo.push(&u.expr),
            Expr::Binary(b) => todo.extend([&*b.lhs, &*b.rhs]),
            Expr::Paren(p) => todo.push(&p.expr),
            Expr::Subquery(s) => todo.push(&s.expr),
            Expr::Call(c) => todo.extend(c.args.args.iter().map(|a| &**a)),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
        }
    }
    Ok(names)
}

/// The metric names of a `/metrics` text (a histogram's as its `_bucket`,
/// `_sum` and `_count` series).
pub fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}
