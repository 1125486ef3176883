//! Text for people: one line for an error and every cause under it, and
//! text from the log made safe to print ([`printable`]).
//!
//! An error's own message says only what failed at its level and chains its
//! cause (`#[source]`); whoever shows it to a person prints the chain once,
//! with [`Chain`]. Logging `%e` alone would drop the causes, and putting the
//! cause into the message as well would say it twice.

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its sources, `: `-separated:
/// `reading the partitions of t: topic t does not exist`.
///
/// Some libraries' errors (sqlx's, std's I/O wrappers) put their source
/// into their own message as well; a cause whose text the link above it
/// already shows is left out, so that it is still said once.
///
/// ```
/// use stockledger_core::report::Chain;
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("reading the partitions of {0}")]
/// struct Partitions(String, #[source] Missing);
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("topic {0} does not exist")]
/// struct Missing(String);
///
/// let e = Partitions("orders".into(), Missing("orders".into()));
/// assert_eq!(
///     Chain(&e).to_string(),
///     "reading the partitions of orders: topic orders does not exist"
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(pub &'a dyn Error);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            let text = e.to_string();
            if !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown = text;
            }
            cause = e.source();
        }
        Ok(())
    }
}

/// The chain of `e` as one string, for an answer or a record header.
///
/// ```
/// use stockledger_core::report::chain;
///
/// let e = std::io::Error::new(std::io::ErrorKind::NotFound, "no such topic");
/// assert_eq!(chain(&e), "no such topic");
/// ```
pub fn chain(e: &dyn Error) -> String {
    Chain(e).to_string()
}

/// `s` with each control character written as its Rust escape (`\u{1b}`,
/// `\r`, `\u{0}`): text from the log or the archive (an invalid record's
/// key, a reason) may hold ESC, BEL or CR, which a terminal would obey and a
/// spreadsheet would split a row at. Every command that prints or exports
/// such text writes it so.
///
/// ```
/// use stockledger_core::report::printable;
///
/// assert_eq!(printable("paid\u{1b}[2J\r\u{7}"), "paid\\u{1b}[2J\\r\\u{7}");
/// assert_eq!(printable("déclinée 日本"), "déclinée 日本");
/// ```
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    s.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect::<String>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("reading the partitions of t")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("topic t does not exist")]
    struct Inner;

    #[test]
    fn each_cause_is_printed_once_after_its_effect() {
        assert_eq!(
            chain(&Outer(Inner)),
            "reading the partitions of t: topic t does not exist"
        );
        assert_eq!(chain(&Inner), "topic t does not exist");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("connecting: {0}")]
    struct Repeats(#[source] Inner);

    #[test]
    fn a_cause_the_message_already_shows_is_not_repeated() {
        assert_eq!(
            chain(&Outer2(Repeats(Inner))),
            "reading: connecting: topic t does not exist"
        );
    }

    #[derive(Debug, thiserror::Error)]
    #[error("reading")]
    struct Outer2(#[source] Repeats);
}
