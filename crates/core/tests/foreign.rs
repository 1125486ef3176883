#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed unwrap is a failed test
//! Records of the newest schemas written by fastavro, not by our encoder
//! (`fixtures/foreign_records.py` wrote `fixtures/foreign-records.json`):
//! today's codec reads them as the ledger means them, named units,
//! locations and transfers included.

mod common;

use serde_json::Value;
use stockledger_core::codec::{decode_command, decode_outcome, decode_stock_event};
use stockledger_core::schema::{current, Subject};
use stockledger_core::{CommandBody, CommandKind, RestockMode, ResultCode, StockEventKind};

const FIXTURE: &str = include_str!("fixtures/foreign-records.json");

fn payloads(fixture: &Value, which: &str) -> Vec<Vec<u8>> {
    common::hex_payloads(&fixture[which])
}

fn names<'a>(units: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    units.into_iter().collect()
}

#[test]
fn fastavro_written_seats_decode_as_the_ledger_means_them() {
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    // Written with the newest versions: a new version means a new fixture.
    for (subject, key) in [
        (Subject::Command, "command_schema"),
        (Subject::Outcome, "outcome_schema"),
        (Subject::StockEvent, "event_schema"),
    ] {
        let newest = current(subject);
        let file = format!("{}.v{}.avsc", subject.as_str(), newest.version);
        assert_eq!(
            fixture[key],
            file.as_str(),
            "run fixtures/foreign_records.py"
        );
    }
    let commands = payloads(&fixture, "commands");
    let restock = decode_command(&commands[0]).unwrap();
    let CommandBody::Restock(r) = &restock.body else {
        panic!("{restock:?}");
    };
    assert_eq!((r.mode(), r.quantity()), (RestockMode::Add, 3));
    assert_eq!(
        names(r.named().iter().map(|u| u.as_str())),
        ["A1", "A2", "A3"]
    );
    let hold = decode_command(&commands[1]).unwrap();
    let CommandBody::Deduct(d) = &hold.body else {
        panic!("{hold:?}");
    };
    assert_eq!(
        (d.order_id.as_str(), d.quantity.get(), d.expires_at),
        ("o-1", 2, Some(1_700_000_600_000))
    );
    assert_eq!(names(d.units.iter().map(|u| u.as_str())), ["A2", "A3"]);

    let outcome = decode_outcome(&payloads(&fixture, "outcomes")[0]).unwrap();
    assert_eq!(outcome.decision.result, ResultCode::RejectedInsufficient);
    assert_eq!(
        outcome.decision.reason.as_deref(),
        Some("units not free: A2 (held)")
    );
    assert_eq!(
        names(outcome.units.iter().map(String::as_str)),
        ["A2", "A3"]
    );
}

#[test]
fn fastavro_written_transfers_and_locations_decode_as_the_ledger_means_them() {
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    let commands = payloads(&fixture, "commands");
    let moved = decode_command(&commands[2]).unwrap();
    let CommandBody::Transfer(t) = &moved.body else {
        panic!("{moved:?}");
    };
    assert_eq!(
        (
            t.transfer_id.as_str(),
            t.from().as_str(),
            t.to().as_str(),
            t.quantity().get()
        ),
        ("t-1", "berlin", "paris", 3)
    );
    // fastavro filled the units the record left out with the schema's default.
    let take = decode_command(&commands[3]).unwrap();
    let CommandBody::Deduct(d) = &take.body else {
        panic!("{take:?}");
    };
    assert_eq!(d.location.as_ref().map(|l| l.as_str()), Some("paris"));
    assert!(d.units.is_empty());

    let outcome = decode_outcome(&payloads(&fixture, "outcomes")[1]).unwrap();
    assert_eq!(outcome.kind, Some(CommandKind::Transfer));
    assert_eq!(outcome.adjustment_id.as_deref(), Some("t-1"));
    assert_eq!(outcome.decision.location.as_deref(), Some("berlin"));
    assert_eq!(outcome.to_location.as_deref(), Some("paris"));
}

#[test]
fn fastavro_written_alerts_and_stock_events_decode_as_the_ledger_means_them() {
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    let alerts = decode_command(&payloads(&fixture, "commands")[4]).unwrap();
    let CommandBody::Alerts(a) = &alerts.body else {
        panic!("{alerts:?}");
    };
    assert_eq!(a.low_stock_below.map(|q| q.get()), Some(10));
    let outcome = decode_outcome(&payloads(&fixture, "outcomes")[2]).unwrap();
    assert_eq!(
        outcome.decision.events.kinds().collect::<Vec<_>>(),
        [StockEventKind::SoldOut, StockEventKind::LowStock]
    );
}

#[test]
fn a_fastavro_written_stock_event_decodes_as_the_ledger_means_it() {
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    let event = decode_stock_event(&payloads(&fixture, "events")[0]).unwrap();
    assert_eq!(
        (
            event.kind,
            event.sku.as_str(),
            event.location.as_deref(),
            event.available
        ),
        (StockEventKind::SoldOut, "MUG-1", Some("paris"), 0)
    );
    assert_eq!((event.position.partition, event.position.offset), (1, 8));
}

#[test]
fn fastavro_written_windows_and_pauses_decode_as_the_ledger_means_them() {
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    let commands = payloads(&fixture, "commands");
    let window = decode_command(&commands[5]).unwrap();
    let CommandBody::Window(w) = &window.body else {
        panic!("{window:?}");
    };
    assert_eq!(
        (
            w.change_id.as_str(),
            w.window.opens_at(),
            w.window.closes_at()
        ),
        ("sale-1", Some(1_700_003_600_000), None)
    );
    let pause = decode_command(&commands[6]).unwrap();
    assert!(matches!(&pause.body, CommandBody::Pause(p) if p.change_id.as_str() == "stop-1"));
    let resume = decode_command(&commands[7]).unwrap();
    assert!(matches!(&resume.body, CommandBody::Resume(r) if r.change_id.as_str() == "go-1"));

    let outcomes = payloads(&fixture, "outcomes");
    let set = decode_outcome(&outcomes[3]).unwrap();
    assert_eq!(set.kind, Some(CommandKind::Window));
    assert_eq!(set.adjustment_id.as_deref(), Some("sale-1"));
    assert_eq!(
        (set.opens_at, set.closes_at),
        (Some(1_700_003_600_000), None)
    );
    assert_eq!(
        set.decision.events.kinds().collect::<Vec<_>>(),
        [StockEventKind::Closed]
    );
    // fastavro filled the window fields the record left out with null.
    let refused = decode_outcome(&outcomes[4]).unwrap();
    assert_eq!(refused.decision.result, ResultCode::RejectedPaused);
    assert_eq!((refused.opens_at, refused.closes_at), (None, None));

    let paused = decode_stock_event(&payloads(&fixture, "events")[1]).unwrap();
    assert_eq!(
        (paused.kind, paused.location.as_deref()),
        (StockEventKind::Paused, None)
    );
}

#[test]
fn a_fastavro_written_deduct_of_nothing_is_a_command_the_rules_refuse() {
    let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
    let zero = decode_command(&payloads(&fixture, "commands")[8]).unwrap();
    let CommandBody::Refused(refused) = &zero.body else {
        panic!("{zero:?}");
    };
    assert_eq!(
        (refused.kind, refused.quantity, refused.problem.field),
        (CommandKind::Deduct, Some(0), "quantity")
    );
    assert_eq!(refused.order_id.as_ref().map(|o| o.as_str()), Some("o-4"));
    let answer = decode_outcome(&payloads(&fixture, "outcomes")[5]).unwrap();
    assert_eq!(answer.decision.result, ResultCode::RejectedValue);
    assert_eq!(answer.decision.figures().map(|f| f.total), Some(10));
}
