//! A stream's event id: where it has read the events topic up to, the
//! next offset of each partition (`0:1841,1:977`). A browser sends the
//! last one back as `Last-Event-ID` to resume.

use std::collections::BTreeMap;

/// Where a stream has read the events topic up to: the next offset of
/// each partition. Its text is the stream's event id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions(pub(super) BTreeMap<i32, i64>);

impl Positions {
    /// The most partitions an id may name.
    const MAX_PARTITIONS: usize = 4096;

    /// Parses an event id, `partition:next_offset` joined by commas.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut positions = BTreeMap::new();
        for (i, entry) in text.split(',').filter(|e| !e.is_empty()).enumerate() {
            if i >= Self::MAX_PARTITIONS {
                return Err(format!(
                    "names more than {} partitions",
                    Self::MAX_PARTITIONS
                ));
            }
            let parsed = entry
                .split_once(':')
                .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)));
            match parsed {
                Some((p, o)) if p >= 0 && o >= 0 => {
                    positions.insert(p, o);
                }
                _ => {
                    return Err(format!(
                        "{entry:?} is not partition:offset (two whole numbers, 0 or more)"
                    ))
                }
            }
        }
        Ok(Self(positions))
    }

    pub(super) fn next(&self, partition: i32) -> i64 {
        self.0.get(&partition).copied().unwrap_or(0)
    }

    pub(super) fn id(&self) -> String {
        let mut id = String::new();
        for (p, o) in &self.0 {
            if !id.is_empty() {
                id.push(',');
            }
            id.push_str(&format!("{p}:{o}"));
        }
        id
    }
}
