#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
//! Every released schema version is read from the bytes the release that
//! introduced it really wrote, not from what this release's encoder makes
//! of an older schema. `fixtures/releases/*.json` were written by those
//! releases' own encoders (`fixtures/releases/generate.sh` runs
//! its `script_vN.rs` in a checkout of each); this test
//! decodes them with today's codec and expects the scripts' commands and
//! outcomes, resolved into today's types.

mod common;

use std::collections::BTreeSet;

use serde_json::Value;
use stockledger_core::codec::{decode_command, decode_outcome, decode_stock_event, fingerprint_of};
use stockledger_core::schema;
use stockledger_core::{
    Alerts, Command, CommandBody, Confirm, Decision, Deduct, Expire, Limit, LocationId,
    LogPosition, Outcome, Pause, Quantity, Refund, Restock, RestockMode, ResultCode, Resume,
    Rollback, SaleWindow, StockEvent, StockEventKind, StockEvents, Transfer, UnitId, Window,
};

/// (file, text, what its release's Outcome schema carries: restock mode and
/// rollback reason since v3).
const RELEASES: [(&str, &str, bool); 11] = [
    (
        "command-v1-outcome-v1-legacy",
        include_str!("fixtures/releases/command-v1-outcome-v1-legacy.json"),
        false,
    ),
    (
        "command-v1-outcome-v2",
        include_str!("fixtures/releases/command-v1-outcome-v2.json"),
        false,
    ),
    (
        "command-v1-outcome-v3",
        include_str!("fixtures/releases/command-v1-outcome-v3.json"),
        true,
    ),
    (
        "command-v2-outcome-v4",
        include_str!("fixtures/releases/command-v2-outcome-v4.json"),
        true,
    ),
    (
        "command-v3-outcome-v5",
        include_str!("fixtures/releases/command-v3-outcome-v5.json"),
        true,
    ),
    (
        "command-v4-outcome-v6",
        include_str!("fixtures/releases/command-v4-outcome-v6.json"),
        true,
    ),
    (
        "command-v5-outcome-v7",
        include_str!("fixtures/releases/command-v5-outcome-v7.json"),
        true,
    ),
    (
        "command-v6-outcome-v8",
        include_str!("fixtures/releases/command-v6-outcome-v8.json"),
        true,
    ),
    (
        "command-v6-outcome-v8-event-v1",
        include_str!("fixtures/releases/command-v6-outcome-v8-event-v1.json"),
        true,
    ),
    (
        "command-v7-outcome-v9-event-v2",
        include_str!("fixtures/releases/command-v7-outcome-v9-event-v2.json"),
        true,
    ),
    (
        "command-v7-outcome-v10-event-v2",
        include_str!("fixtures/releases/command-v7-outcome-v10-event-v2.json"),
        true,
    ),
];

fn payloads(text: &str, which: &str) -> Vec<Vec<u8>> {
    let fixture: Value = serde_json::from_str(text).unwrap();
    match &fixture["bytes"][which] {
        // Releases before the stock events topic wrote no events.
        Value::Null if which == "events" => Vec::new(),
        list => common::hex_payloads(list),
    }
}

fn command(sku: &str, id: &str, body: CommandBody) -> Command {
    Command {
        command_id: id.parse().unwrap(),
        sku: sku.parse().unwrap(),
        occurred_at: 1_700_000_000_000,
        body,
    }
}

fn quantity(n: i64) -> Quantity {
    Quantity::new(n).unwrap()
}

/// What a script's release decided of each command: result, delta,
/// available and reason (the total is always 10).
type Decided = (ResultCode, i64, i64, Option<String>);

/// `script_v1.rs`: its commands and what was decided of each.
fn script_v1() -> (Vec<Command>, Vec<Decided>) {
    let c = |id, body| command("SKU-1", id, body);
    let commands = vec![
        c(
            "c-restock",
            CommandBody::Restock(
                Restock::new("a-1".parse().unwrap(), RestockMode::Set, 10).unwrap(),
            ),
        ),
        c(
            "c-deduct",
            CommandBody::Deduct(Deduct::new("o-1".parse().unwrap(), quantity(2))),
        ),
        c(
            "c-rollback",
            CommandBody::Rollback(
                Rollback::new("o-1".parse().unwrap(), Some("cancelled".into())).unwrap(),
            ),
        ),
    ];
    let applied = |delta, available| (ResultCode::Applied, delta, available, None);
    (
        commands,
        vec![applied(10, 10), applied(-2, 8), applied(2, 10)],
    )
}

/// `script_v2.rs`, the same way.
fn script_v2() -> (Vec<Command>, Vec<Decided>) {
    let c = |id, body| command("SKU-2", id, body);
    let hold = |order: &str| {
        let mut d = Deduct::new(order.parse().unwrap(), quantity(3));
        d.user_id = Some("u-1".parse().unwrap());
        d.expires_at = Some(1_700_000_060_000);
        CommandBody::Deduct(d)
    };
    let order = || "o-1".parse().unwrap();
    let commands = vec![
        c(
            "c-restock",
            CommandBody::Restock(
                Restock::new("a-2".parse().unwrap(), RestockMode::Add, 10).unwrap(),
            ),
        ),
        c(
            "c-limit",
            CommandBody::Limit(Limit {
                per_user: Some(quantity(4)),
            }),
        ),
        c("c-hold-1", hold("o-1")),
        c(
            "c-confirm",
            CommandBody::Confirm(Confirm { order_id: order() }),
        ),
        c(
            "c-refund",
            CommandBody::Refund(Refund {
                order_id: order(),
                quantity: Some(quantity(1)),
            }),
        ),
        c("c-hold-2", hold("o-2")),
        c(
            "c-expire",
            CommandBody::Expire(Expire {
                order_id: "o-2".parse().unwrap(),
            }),
        ),
    ];
    let said = |result, delta, available| (result, delta, available, Some("as decided".into()));
    let decisions = vec![
        said(ResultCode::Applied, 10, 10),
        said(ResultCode::Applied, 0, 10),
        said(ResultCode::Applied, -3, 7),
        said(ResultCode::Confirmed, 0, 7),
        said(ResultCode::Refunded, 1, 8),
        said(ResultCode::RejectedLimit, 0, 8),
        said(ResultCode::IgnoredNotDue, 0, 8),
    ];
    (commands, decisions)
}

/// `script_v3.rs`: `script_v2.rs` with the second hold a basket's line.
fn script_v3() -> (Vec<Command>, Vec<Decided>) {
    let (mut commands, decisions) = script_v2();
    if let CommandBody::Deduct(d) = &mut commands[5].body {
        d.basket_id = Some("o-2".parse().unwrap());
    }
    (commands, decisions)
}

/// `script_v4.rs`: `script_v3.rs` selling ten named seats, three a hold.
fn script_v4() -> (Vec<Command>, Vec<Decided>) {
    let (mut commands, decisions) = script_v3();
    let seats =
        |names: &[&str]| -> Vec<UnitId> { names.iter().map(|n| n.parse().unwrap()).collect() };
    let all: Vec<String> = (1..=10).map(|n| format!("A{n}")).collect();
    commands[0].body = CommandBody::Restock(Restock::units("a-2".parse().unwrap(), &all).unwrap());
    for (i, names) in [(2, ["A1", "A2", "A3"]), (5, ["A4", "A5", "A6"])] {
        if let CommandBody::Deduct(d) = &mut commands[i].body {
            d.units = seats(&names);
        }
    }
    (commands, decisions)
}

/// `script_v5.rs`: stock in berlin and paris, a transfer between them, a
/// deduct from paris, a hold left to the ledger's choice, a rollback.
fn script_v5() -> (Vec<Command>, Vec<Decided>) {
    let c = |id, body| command("SKU-3", id, body);
    let at = |name: &str| -> LocationId { name.parse().unwrap() };
    let stock = |id: &str, quantity, name: &str| {
        let restock = Restock::new(id.parse().unwrap(), RestockMode::Add, quantity).unwrap();
        CommandBody::Restock(restock.at(at(name)).unwrap())
    };
    let moved = Transfer::new(
        "t-1".parse().unwrap(),
        at("paris"),
        at("berlin"),
        quantity(1),
    );
    let taken = Deduct::new("o-1".parse().unwrap(), quantity(2)).at(at("paris"));
    let commands = vec![
        c("c-berlin", stock("a-5", 6, "berlin")),
        c("c-paris", stock("a-6", 4, "paris")),
        c("c-transfer", CommandBody::Transfer(moved.unwrap())),
        c("c-deduct", CommandBody::Deduct(taken.unwrap())),
        c(
            "c-hold",
            CommandBody::Deduct(Deduct {
                user_id: Some("u-1".parse().unwrap()),
                expires_at: Some(1_700_000_060_000),
                ..Deduct::new("o-2".parse().unwrap(), quantity(3))
            }),
        ),
        c(
            "c-rollback",
            CommandBody::Rollback(Rollback::new("o-1".parse().unwrap(), None).unwrap()),
        ),
    ];
    let said = |delta, available| {
        (
            ResultCode::Applied,
            delta,
            available,
            Some("as decided".into()),
        )
    };
    let decisions = vec![
        said(6, 6),
        said(4, 10),
        said(0, 10),
        said(-2, 8),
        said(-3, 5),
        said(2, 7),
    ];
    (commands, decisions)
}

/// `script_v6.rs`: `script_v5.rs` on SKU-4, then a low-stock threshold;
/// its hold's outcome says LOW_STOCK.
fn script_v6() -> (Vec<Command>, Vec<Decided>) {
    let (commands, mut decisions) = script_v5();
    let mut commands: Vec<Command> = commands
        .into_iter()
        .map(|c| command("SKU-4", c.command_id.as_str(), c.body))
        .collect();
    commands.push(command(
        "SKU-4",
        "c-alerts",
        CommandBody::Alerts(Alerts {
            low_stock_below: Some(quantity(8)),
        }),
    ));
    decisions.push((ResultCode::Applied, 0, 7, Some("as decided".into())));
    (commands, decisions)
}

/// `script_v8.rs`: `script_v6.rs`, then a sale window already open, a
/// pause and a resume; the last two raise PAUSED and RESUMED.
fn script_v8() -> (Vec<Command>, Vec<Decided>) {
    let (mut commands, mut decisions) = script_v6();
    let c = |id, body| command("SKU-4", id, body);
    commands.push(c(
        "c-window",
        CommandBody::Window(Window {
            change_id: "w-1".parse().unwrap(),
            window: SaleWindow::new(Some(1_699_999_000_000), Some(1_700_100_000_000)).unwrap(),
        }),
    ));
    commands.push(c(
        "c-pause",
        CommandBody::Pause(Pause {
            change_id: "p-1".parse().unwrap(),
        }),
    ));
    commands.push(c(
        "c-resume",
        CommandBody::Resume(Resume {
            change_id: "r-1".parse().unwrap(),
        }),
    ));
    for _ in 0..3 {
        decisions.push((ResultCode::Applied, 0, 7, Some("as decided".into())));
    }
    (commands, decisions)
}

/// `script_v9.rs`: `script_v8.rs`, then a deduct answered `REJECTED_VALUE`.
fn script_v9() -> (Vec<Command>, Vec<Decided>) {
    let (mut commands, mut decisions) = script_v8();
    commands.push(command(
        "SKU-4",
        "c-refused",
        CommandBody::Deduct(Deduct::new("o-3".parse().unwrap(), quantity(1))),
    ));
    decisions.push((ResultCode::RejectedValue, 0, 7, Some("as decided".into())));
    (commands, decisions)
}

/// The released version a payload's header names, by either fingerprint.
fn version_of(payload: &[u8]) -> (&'static str, u32) {
    let fingerprint = fingerprint_of(payload).expect("a single-object header");
    let r = schema::released()
        .iter()
        .find(|r| r.fingerprint == fingerprint || r.legacy_fingerprint == Some(fingerprint))
        .unwrap_or_else(|| panic!("{fingerprint:016x} is no released version"));
    (r.subject.as_str(), r.version)
}

#[test]
fn bytes_each_release_wrote_decode_into_todays_commands_and_outcomes() {
    for (name, text, has_command_details) in RELEASES {
        let (commands, decisions) = if name.starts_with("command-v7-outcome-v10") {
            script_v9()
        } else if name.starts_with("command-v7") {
            script_v8()
        } else if name.starts_with("command-v6") {
            // script_v7.rs is script_v6.rs that also writes the events.
            script_v6()
        } else if name.starts_with("command-v5") {
            script_v5()
        } else if name.starts_with("command-v4") {
            script_v4()
        } else if name.starts_with("command-v3") {
            script_v3()
        } else if name.starts_with("command-v2") {
            script_v2()
        } else {
            script_v1()
        };
        let written = payloads(text, "commands");
        assert_eq!(written.len(), commands.len(), "{name}");
        for (payload, expected) in written.iter().zip(&commands) {
            assert_eq!(&decode_command(payload).unwrap(), expected, "{name}");
        }
        let partition = if name.starts_with("command-v1") { 3 } else { 5 };
        let written = payloads(text, "outcomes");
        assert_eq!(written.len(), commands.len(), "{name}");
        let mut raised = Vec::new();
        for (offset, (payload, (c, (result, delta, available, reason)))) in written
            .iter()
            .zip(commands.iter().zip(decisions.clone()))
            .enumerate()
        {
            let position = LogPosition {
                topic: "stock.ledger".into(),
                partition,
                offset: offset as i64,
            };
            let decision = Decision {
                result,
                delta,
                available,
                total: 10,
                reason,
                // Only script_v5 names locations; its release wrote them.
                location: c.body.location().map(|l| l.as_str().to_owned()),
                // Only script_v6 and script_v8 raise them: at the hold,
                // and script_v8 at its pause and resume.
                events: match offset {
                    _ if !name.starts_with("command-v6") && !name.starts_with("command-v7") => {
                        StockEvents::NONE
                    }
                    4 => StockEvents::of([StockEventKind::LowStock]),
                    8 => StockEvents::of([StockEventKind::Paused]),
                    9 => StockEvents::of([StockEventKind::Resumed]),
                    _ => StockEvents::NONE,
                },
            };
            let mut expected = Outcome::for_command(position, c, decision);
            if !has_command_details {
                expected.restock_mode = None;
                expected.rollback_reason = None;
            }
            assert_eq!(decode_outcome(payload).unwrap(), expected, "{name}");
            raised.extend(StockEvent::of(&expected));
        }
        let events: Vec<StockEvent> = payloads(text, "events")
            .iter()
            .map(|p| decode_stock_event(p).unwrap())
            .collect();
        if name.contains("-event-v") {
            assert_eq!(events, raised, "{name}");
        } else {
            assert!(events.is_empty(), "{name}");
        }
    }
}

#[test]
fn every_released_version_has_bytes_its_release_wrote() {
    let written: BTreeSet<(&str, u32)> = RELEASES
        .iter()
        .flat_map(|(_, text, _)| {
            let mut all = payloads(text, "commands");
            all.extend(payloads(text, "outcomes"));
            all.extend(payloads(text, "events"));
            all
        })
        .map(|p| version_of(&p))
        .collect();
    let released: BTreeSet<(&str, u32)> = schema::released()
        .iter()
        .map(|r| (r.subject.as_str(), r.version))
        .collect();
    assert_eq!(
        written, released,
        "add the release that introduces a version to fixtures/releases/generate.sh"
    );
}
