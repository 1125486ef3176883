//! Rows printed as an aligned table (comfy-table), JSON lines or CSV, for
//! the commands that print rows.

use clap::ValueEnum;
use serde_json::{Map, Value};
use stockledger_core::report::printable;

/// How a command that prints one result prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Style {
    /// Sentences or aligned lines, for people.
    Text,
    /// One JSON object, for scripts.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns, for people.
    Table,
    /// One JSON object per line.
    Json,
    /// Comma-separated, with a header line.
    Csv,
}

/// Prints `rows` (each the same columns, in order) in `format`. Numbers stay
/// numbers in JSON; absent values are `null` in JSON, empty elsewhere.
pub fn print(format: Format, columns: &[&str], rows: &[Vec<Value>]) {
    match format {
        Format::Json => {
            for row in rows {
                let object: Map<String, Value> = columns
                    .iter()
                    .map(|c| (*c).to_owned())
                    .zip(row.iter().cloned())
                    .collect();
                println!("{}", Value::Object(object));
            }
        }
        Format::Csv => {
            let mut out = csv::Writer::from_writer(std::io::stdout().lock());
            let written = out.write_record(columns).and_then(|()| {
                rows.iter()
                    .try_for_each(|row| out.write_record(row.iter().map(text)))
            });
            if let Err(e) = written.and_then(|()| Ok(out.flush()?)) {
                eprintln!("error: writing CSV to standard output: {e}");
            }
        }
        Format::Table => {
            // Aligned by display width (a CJK SKU is two columns a
            // character), no borders: columns two spaces apart.
            let mut table = comfy_table::Table::new();
            table
                .load_style(comfy_table::presets::NOTHING)
                .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
                .set_header(columns.iter().copied());
            for column in table.column_iter_mut() {
                column.set_padding((0, 2));
            }
            for row in rows {
                table.add_row(row.iter().map(text));
            }
            for line in table.lines() {
                println!("{}", line.trim_end());
            }
        }
    }
}

/// A value as a cell or a line shows it, never with a control character
/// raw: text from the log or the archive (a reason, a dead letter's key)
/// may hold ESC or CR, which a terminal would obey.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => printable(s).into_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_other_text_is_kept() {
        let shown = text(&Value::from("paid\u{1b}[2J\rrefund\0 déclinée 日本"));
        assert_eq!(shown, "paid\\u{1b}[2J\\rrefund\\u{0} déclinée 日本");
        assert!(!shown.chars().any(char::is_control));
        assert_eq!(text(&Value::from("plain")), "plain");
    }
}
