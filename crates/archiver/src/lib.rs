//! The CDC archiver: outcomes from Kafka into PostgreSQL, for analysts.
//! The only writer of the archive's rows (snapshots are the maintenance
//! tools'), and the owner of its schema and roles.
//!
//! - [`archiver`]: the consumer-group member that writes pages of outcomes,
//!   each page and the archiver's progress in one transaction, with
//!   `ON CONFLICT DO NOTHING` on the log position.
//! - [`MIGRATOR`]: the schema, from the repository's `migrations/`.
//! - [`DbRole`], [`connect_as`], [`connect`]: connections acting as the
//!   archiver's or the analysts' role, and the migrating one.
//!
//! It never touches Redis. Reading the archive back is
//! `stockledger-analysts`; Redis maintenance is `stockledger-maintenance`.

pub mod archiver;

pub use archiver::{run, ArchiverConfig, ArchiverError, ArchiverStats};

/// The archive's migrations; this crate owns the schema.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// A role of the archive's database (made by its migrations), which a
/// connection acts as: least privilege whoever logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbRole {
    /// Reads the archive and its views; writes nothing.
    Analyst,
    /// Writes the archive's rows, hourly totals and progress.
    Archiver,
}

impl DbRole {
    pub fn name(self) -> &'static str {
        match self {
            DbRole::Analyst => "stockledger_analyst",
            DbRole::Archiver => "stockledger_archiver",
        }
    }
}

/// Connects to PostgreSQL without migrating, each connection acting as
/// `role` (`SET ROLE`): the login must be a member of it (the migrating
/// user is made one) or a superuser, and the migrations must have run.
/// A connection is waited for at most `acquire_timeout`.
pub fn connect_as(
    database_url: &str,
    max_connections: u32,
    acquire_timeout: std::time::Duration,
    role: DbRole,
) -> Result<sqlx::PgPool, sqlx::Error> {
    use sqlx::Executor;
    let set_role = match role {
        DbRole::Analyst => "SET ROLE stockledger_analyst",
        DbRole::Archiver => "SET ROLE stockledger_archiver",
    };
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                conn.execute(set_role).await?;
                Ok(())
            })
        })
        .connect_lazy(database_url)
}

/// Connects to PostgreSQL and brings the schema up to date.
pub async fn connect(
    database_url: &str,
    max_connections: u32,
) -> Result<sqlx::PgPool, sqlx::Error> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .connect(database_url)
        .await?;
    MIGRATOR.run(&pool).await?;
    Ok(pool)
}
