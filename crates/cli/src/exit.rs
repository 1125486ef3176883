//! The exit codes of every subcommand, in one table ([`Exit::ALL`];
//! docs/operators.md prints it). Codes above 63 are those of `sysexits.h`,
//! so a supervisor that knows them reads them right.
//!
//! A command returns the code for what it found ([`Exit::Check`],
//! [`Exit::NotFound`]); an error is given its code by [`Exit::of`], which
//! looks through the error's causes for one it knows (a broker that does not
//! answer, a refused password, a record that cannot be decoded…), so no
//! command has to classify the errors of the libraries it calls.

use std::fmt;
use std::process::ExitCode;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use stockledger_client::outcome::OutcomeError;
use stockledger_client::ProducerError;
use stockledger_core::codec::DecodeError;
use stockledger_core::ValidationError;
use stockledger_kafka::topic::LogError;

/// What a `stockledger` exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; healthy; nothing differs.
    Ok,
    /// An error not named by another code (the message says what).
    Failure,
    /// A flag, argument or environment variable is wrong; nothing was done.
    Usage,
    /// The command ran and its answer is no: reconcile found differences,
    /// status found lag, the demo or observe found a broken rule, a command
    /// sent with `--wait` was refused.
    Check,
    /// What was asked for is not there: a SKU or order without state, a
    /// point the archive does not reach yet, a topic or dead letter that
    /// does not exist.
    NotFound,
    /// Data that cannot be decoded or is refused (`EX_DATAERR`): a dead
    /// letter that is still not a valid command when re-driven.
    DataError,
    /// Kafka, Redis or PostgreSQL did not answer (`EX_UNAVAILABLE`).
    Unavailable,
    /// Waiting ran out (`EX_TEMPFAIL`): a decision did not come within
    /// `--wait`, a topic was not read to its end in time. Try again.
    TimedOut,
    /// Credentials or permissions were refused (`EX_NOPERM`): a wrong
    /// password, a role without the grant, an ACL.
    Denied,
    /// Stopped by Ctrl-C or SIGTERM before the end (128 + SIGINT, as a
    /// shell says it): what a replay or repartition wrote is incomplete.
    Interrupted,
}

impl Exit {
    /// Every code, in the order of the table.
    pub const ALL: [Exit; 10] = [
        Exit::Ok,
        Exit::Failure,
        Exit::Usage,
        Exit::Check,
        Exit::NotFound,
        Exit::DataError,
        Exit::Unavailable,
        Exit::TimedOut,
        Exit::Denied,
        Exit::Interrupted,
    ];

    /// The number the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Check => 3,
            Exit::NotFound => 4,
            Exit::DataError => 65,
            Exit::Unavailable => 69,
            Exit::TimedOut => 75,
            Exit::Denied => 77,
            Exit::Interrupted => 130,
        }
    }

    /// The code's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Ok => "ok",
            Exit::Failure => "failure",
            Exit::Usage => "usage",
            Exit::Check => "check failed",
            Exit::NotFound => "not found",
            Exit::DataError => "data error",
            Exit::Unavailable => "unavailable",
            Exit::TimedOut => "timed out",
            Exit::Denied => "denied",
            Exit::Interrupted => "interrupted",
        }
    }

    /// The code that says what `error` was: the first of its causes,
    /// outermost first, that one of the rows is about; [`Exit::Failure`]
    /// when none is.
    pub fn of(error: &anyhow::Error) -> Exit {
        error.chain().find_map(cause_exit).unwrap_or(Exit::Failure)
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// An error that carries its exit code, for a command that knows better
/// than [`Exit::of`] would guess (see [`fail`]).
#[derive(Debug)]
pub struct Coded {
    pub exit: Exit,
    pub message: String,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// An error with `message` that exits with `exit`.
pub fn fail(exit: Exit, message: impl Into<String>) -> anyhow::Error {
    Coded {
        exit,
        message: message.into(),
    }
    .into()
}

/// The code one cause says, if it says one.
fn cause_exit(cause: &(dyn std::error::Error + 'static)) -> Option<Exit> {
    if let Some(c) = cause.downcast_ref::<Coded>() {
        return Some(c.exit);
    }
    if let Some(e) = cause.downcast_ref::<LogError>() {
        return match e {
            LogError::NoSuchTopic(_) => Some(Exit::NotFound),
            LogError::Timeout { .. } => Some(Exit::TimedOut),
            LogError::Kafka(_) | LogError::Task(_) => None,
        };
    }
    if let Some(e) = cause.downcast_ref::<ProducerError>() {
        return match e {
            ProducerError::Invalid(_) | ProducerError::ContractSetting { .. } => Some(Exit::Usage),
            ProducerError::Delivery(d) if d.login_refused.is_some() => Some(Exit::Denied),
            _ => None,
        };
    }
    if cause.downcast_ref::<ValidationError>().is_some()
        || cause
            .downcast_ref::<stockledger_client::basket::InputError>()
            .is_some()
    {
        return Some(Exit::Usage);
    }
    if let Some(OutcomeError::Timeout { .. }) = cause.downcast_ref::<OutcomeError>() {
        return Some(Exit::TimedOut);
    }
    if cause.downcast_ref::<DecodeError>().is_some() {
        return Some(Exit::DataError);
    }
    if let Some(e) = cause.downcast_ref::<KafkaError>() {
        // rdkafka gives no code for a failed admin request, though it
        // holds one.
        let code = match e {
            KafkaError::AdminOp(code) => Some(*code),
            other => other.rdkafka_error_code(),
        };
        return code.and_then(kafka_exit);
    }
    if let Some(e) = cause.downcast_ref::<redis::RedisError>() {
        return redis_exit(e);
    }
    if let Some(e) = cause.downcast_ref::<sqlx::Error>() {
        return postgres_exit(e);
    }
    if let Some(e) = cause.downcast_ref::<std::io::Error>() {
        return io_exit(e);
    }
    None
}

fn kafka_exit(code: RDKafkaErrorCode) -> Option<Exit> {
    use RDKafkaErrorCode as C;
    match code {
        C::BrokerTransportFailure
        | C::AllBrokersDown
        | C::Resolve
        | C::OperationTimedOut
        | C::TimedOutQueue
        | C::MessageTimedOut
        | C::RequestTimedOut
        | C::NetworkException
        | C::BrokerNotAvailable
        | C::LeaderNotAvailable
        | C::NotCoordinator
        | C::CoordinatorNotAvailable => Some(Exit::Unavailable),
        C::Authentication
        | C::SaslAuthenticationFailed
        | C::TopicAuthorizationFailed
        | C::GroupAuthorizationFailed
        | C::ClusterAuthorizationFailed
        | C::TransactionalIdAuthorizationFailed => Some(Exit::Denied),
        C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition => Some(Exit::NotFound),
        _ => None,
    }
}

fn redis_exit(e: &redis::RedisError) -> Option<Exit> {
    if e.kind() == redis::ErrorKind::AuthenticationFailed
        || e.code()
            .is_some_and(|c| c == "NOAUTH" || c == "WRONGPASS" || c == "NOPERM")
    {
        return Some(Exit::Denied);
    }
    (e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped())
        .then_some(Exit::Unavailable)
}

fn postgres_exit(e: &sqlx::Error) -> Option<Exit> {
    match e {
        sqlx::Error::Io(io) => io_exit(io).or(Some(Exit::Unavailable)),
        // A protocol error is what a connection cut during its start-up
        // looks like (`unexpected response from SSLRequest`, as the
        // nemesis saw while it cut the path to PostgreSQL): the server is
        // not there to speak to, whatever the reason.
        sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => {
            Some(Exit::Unavailable)
        }
        sqlx::Error::Database(db) => {
            let code = db.code()?;
            // Class 28: invalid authorization; 42501: insufficient privilege.
            (code.starts_with("28") || code == "42501").then_some(Exit::Denied)
        }
        _ => None,
    }
}

fn io_exit(e: &std::io::Error) -> Option<Exit> {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::TimedOut
            | K::HostUnreachable
            | K::NetworkUnreachable
    )
    .then_some(Exit::Unavailable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_zero_is_ok() {
        let mut codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), Exit::ALL.len());
        assert_eq!(Exit::Ok.code(), 0);
        assert_eq!(Exit::Usage.code(), 2, "clap's own code for bad arguments");
    }

    #[test]
    fn an_error_takes_the_code_of_the_outermost_cause_that_has_one() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = anyhow::Error::from(refused).context("connecting to Redis");
        assert_eq!(Exit::of(&e), Exit::Unavailable);

        let e = fail(Exit::NotFound, "no such dead letter").context("dlq show");
        assert_eq!(Exit::of(&e), Exit::NotFound);

        let e = anyhow::Error::from(LogError::NoSuchTopic("t".into()));
        assert_eq!(Exit::of(&e), Exit::NotFound);

        let e = anyhow::anyhow!("something else");
        assert_eq!(Exit::of(&e), Exit::Failure);
    }

    /// `stockledger apply` with every broker away exited 1: its admin
    /// request timed out.
    #[test]
    fn an_admin_request_the_brokers_do_not_answer_is_unavailable() {
        use rdkafka::error::KafkaError;
        use rdkafka::types::RDKafkaErrorCode;
        let timed_out = stockledger_kafka::admin::AdminError::Request {
            what: "describing the topic's configuration",
            source: KafkaError::AdminOp(RDKafkaErrorCode::OperationTimedOut),
        };
        let e = anyhow::Error::from(stockledger_applier::ApplierError::TopicConfig(timed_out));
        assert_eq!(Exit::of(&e), Exit::Unavailable, "{e:#}");
        // The nemesis of seed 7: a metadata request that waited for a
        // connection to a node that was down.
        let queued = KafkaError::MetadataFetch(RDKafkaErrorCode::TimedOutQueue);
        assert_eq!(Exit::of(&anyhow::Error::from(queued)), Exit::Unavailable);
    }

    /// The nemesis of seed 20261125 cut the path to PostgreSQL while an
    /// archiver started: it exited 1, not 69.
    #[test]
    fn a_postgresql_connection_cut_while_it_starts_is_unavailable() {
        let cut = sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".into());
        let e = anyhow::Error::from(cut).context("a PostgreSQL request failed");
        assert_eq!(Exit::of(&e), Exit::Unavailable);
    }
}
