//! The load script's reply (`lua/load.lua`): one string holding, per key
//! read, a list of optional texts, read here in one pass.
//!
//! A list is its count of items and `#`, then each item: its length in
//! bytes, `:` and its bytes, or `-` for a field the hash lacks.

use crate::projection::ProjectionError;

/// The lists of `reply`, in order; an error names the first place it is
/// not the script's encoding.
pub(crate) fn lists(reply: &[u8]) -> Result<Vec<Vec<Option<String>>>, ProjectionError> {
    let mut at = 0;
    let mut lists = Vec::new();
    while at < reply.len() {
        let count = number(reply, &mut at, b'#')?;
        // Each item takes a byte at least: a count beyond what is left is
        // no list, found before anything is reserved.
        if count > reply.len() - at {
            return Err(unreadable(reply, at));
        }
        let mut list = Vec::with_capacity(count);
        for _ in 0..count {
            if reply.get(at) == Some(&b'-') {
                at += 1;
                list.push(None);
                continue;
            }
            let len = number(reply, &mut at, b':')?;
            let text = (at.checked_add(len))
                .and_then(|end| reply.get(at..end))
                .and_then(|bytes| std::str::from_utf8(bytes).ok())
                .ok_or_else(|| unreadable(reply, at))?;
            at += len;
            list.push(Some(text.to_owned()));
        }
        lists.push(list);
    }
    Ok(lists)
}

/// A decimal number at `at`, ended by `end`, read past it.
fn number(reply: &[u8], at: &mut usize, end: u8) -> Result<usize, ProjectionError> {
    let start = *at;
    let mut n: usize = 0;
    while let Some(&digit @ b'0'..=b'9') = reply.get(*at) {
        n = (n.checked_mul(10))
            .and_then(|n| n.checked_add(usize::from(digit - b'0')))
            .ok_or_else(|| unreadable(reply, start))?;
        *at += 1;
    }
    if *at == start || reply.get(*at) != Some(&end) {
        return Err(unreadable(reply, start));
    }
    *at += 1;
    Ok(n)
}

fn unreadable(reply: &[u8], at: usize) -> ProjectionError {
    let from = at.min(reply.len());
    let shown = &reply[from..reply.len().min(from + 40)];
    ProjectionError::Corrupt {
        key: "(the load script's reply)".to_owned(),
        value: format!("at byte {at}: {}", String::from_utf8_lossy(shown)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[test]
    fn lists_of_texts_and_missing_fields_are_read_back() {
        // A text may hold the separators; é is two bytes.
        let reply = "3#5:hello-0:2#1:*6:é:#-x2#-1:-0#";
        assert_eq!(
            lists(reply.as_bytes()).unwrap(),
            vec![
                vec![some("hello"), None, some("")],
                vec![some("*"), some("é:#-x")],
                vec![None, some("-")],
                vec![],
            ]
        );
        assert_eq!(lists(b"").unwrap(), Vec::<Vec<Option<String>>>::new());
    }

    #[test]
    fn a_reply_not_in_the_encoding_is_an_error_naming_where() {
        for (reply, at) in [
            (&b"2#-"[..], 2),
            (b"2#-1:", 5),
            (b"1#5:abc", 4),
            (b"x#", 0),
            (b"1#:", 2),
            (b"1#3;abc", 2),
            (b"99999999999999999999999#", 0),
            (b"1#2:\xFF\xFE", 4),
        ] {
            let error = lists(reply).unwrap_err().to_string();
            assert!(
                error.contains(&format!("at byte {at}:")),
                "{reply:?}: {error}"
            );
        }
    }
}
