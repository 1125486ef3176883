//! Avro values to and from the domain's types: optional fields, enum
//! symbols, and a decoded record's fields taken by name with an error that
//! names the field.

use apache_avro::types::Value;

use super::DecodeError;
use crate::command::RestockMode;
use crate::ids::ValidationError;

pub(super) fn optional_string(s: Option<&str>) -> Value {
    match s {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(s) => Value::Union(1, Box::new(Value::String(s.to_owned()))),
    }
}

pub(super) fn optional_long(n: Option<i64>) -> Value {
    match n {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(n) => Value::Union(1, Box::new(Value::Long(n))),
    }
}

pub(super) fn strings<S: AsRef<str>>(items: &[S]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|s| Value::String(s.as_ref().to_owned()))
            .collect(),
    )
}

pub(super) fn optional_timestamp(ms: Option<i64>) -> Value {
    match ms {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(ms) => Value::Union(1, Box::new(Value::TimestampMillis(ms))),
    }
}

/// A datum that decoded but does not have the shape of the current schema
/// (cannot happen after resolution; kept as an error rather than a panic).
pub(super) fn restock_mode(mode: RestockMode) -> Value {
    match mode {
        RestockMode::Add => Value::Enum(0, "ADD".into()),
        RestockMode::Set => Value::Enum(1, "SET".into()),
    }
}

/// The restock mode a symbol names, if it names one.
pub(super) fn restock_mode_of(symbol: &str) -> Option<RestockMode> {
    match symbol {
        "ADD" => Some(RestockMode::Add),
        "SET" => Some(RestockMode::Set),
        _ => None,
    }
}

fn unknown_symbol(name: &str, symbol: &str) -> DecodeError {
    shape(format!("{name}: unknown symbol {symbol}"))
}

pub(super) fn malformed(field: &str, value: &impl std::fmt::Debug) -> DecodeError {
    shape(format!("{field}: unexpected value {value:?}"))
}

pub(super) fn shape(message: String) -> DecodeError {
    DecodeError::Malformed {
        writer: "after resolution".into(),
        message,
    }
}

/// The fields of a decoded record, taken out by name.
pub(super) struct Fields(Vec<(String, Value)>);

impl Fields {
    pub(super) fn of(value: Value) -> Result<Self, DecodeError> {
        match value {
            Value::Record(fields) => Ok(Self(fields)),
            other => Err(malformed("record", &other)),
        }
    }

    pub(super) fn take(&mut self, name: &str) -> Result<Value, DecodeError> {
        let index = self
            .0
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| shape(format!("{name}: missing")))?;
        Ok(self.0.swap_remove(index).1)
    }

    pub(super) fn optional(&mut self, name: &str) -> Result<Option<Value>, DecodeError> {
        match self.take(name)? {
            Value::Union(_, inner) => match *inner {
                Value::Null => Ok(None),
                v => Ok(Some(v)),
            },
            other => Err(malformed(name, &other)),
        }
    }
}

/// A record's fields taken out by name with an error naming the field,
/// whichever reader read them: a `Value` of apache-avro's ([`Fields`]), or
/// the current schema's datum read straight from its bytes
/// (`direct::Stream`, which wants them asked in the schema's order). The
/// rules that build a command from them are written once, over this.
pub(super) trait Record {
    /// What a field that cannot be taken gives: the general reader's
    /// error naming it, or, for the one-pass reader, no more than that
    /// the datum is left to the general reader (a small value, so a
    /// field's result costs no copy of an error's room).
    type Error: From<DecodeError> + From<ValidationError>;

    fn string(&mut self, name: &str) -> Result<String, Self::Error>;
    fn int(&mut self, name: &str) -> Result<i32, Self::Error>;
    fn long(&mut self, name: &str) -> Result<i64, Self::Error>;
    /// An enum's symbol as `parse` reads it; one it does not read is an
    /// error naming the field.
    fn symbol<T>(&mut self, name: &str, parse: fn(&str) -> Option<T>) -> Result<T, Self::Error>;
    fn optional_symbol<T>(
        &mut self,
        name: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Option<T>, Self::Error>;
    /// An array of an enum's symbols, each as `parse` reads it.
    fn symbols<T>(
        &mut self,
        name: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Vec<T>, Self::Error>;
    fn optional_long(&mut self, name: &str) -> Result<Option<i64>, Self::Error>;
    fn optional_string(&mut self, name: &str) -> Result<Option<String>, Self::Error>;
    /// An array of strings (empty when a record written before the field
    /// existed is resolved with its default).
    fn strings(&mut self, name: &str) -> Result<Vec<String>, Self::Error>;
    /// The branch of the union of records `name`, whose fields are read
    /// from then on (the union is the record's last field).
    fn enter(&mut self, name: &str) -> Result<u32, Self::Error>;
}

impl Record for Fields {
    type Error = DecodeError;

    fn string(&mut self, name: &str) -> Result<String, DecodeError> {
        match self.take(name)? {
            Value::String(s) => Ok(s),
            other => Err(malformed(name, &other)),
        }
    }

    fn long(&mut self, name: &str) -> Result<i64, DecodeError> {
        match self.take(name)? {
            Value::Long(n) | Value::TimestampMillis(n) => Ok(n),
            other => Err(malformed(name, &other)),
        }
    }

    fn int(&mut self, name: &str) -> Result<i32, DecodeError> {
        match self.take(name)? {
            Value::Int(n) => Ok(n),
            other => Err(malformed(name, &other)),
        }
    }

    fn symbol<T>(&mut self, name: &str, parse: fn(&str) -> Option<T>) -> Result<T, DecodeError> {
        match self.take(name)? {
            Value::Enum(_, symbol) => parse(&symbol).ok_or_else(|| unknown_symbol(name, &symbol)),
            other => Err(malformed(name, &other)),
        }
    }

    fn optional_symbol<T>(
        &mut self,
        name: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Option<T>, DecodeError> {
        match self.optional(name)? {
            None => Ok(None),
            Some(Value::Enum(_, symbol)) => parse(&symbol)
                .map(Some)
                .ok_or_else(|| unknown_symbol(name, &symbol)),
            Some(other) => Err(malformed(name, &other)),
        }
    }

    fn symbols<T>(
        &mut self,
        name: &str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<Vec<T>, DecodeError> {
        match self.take(name)? {
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::Enum(_, symbol) => {
                        parse(&symbol).ok_or_else(|| unknown_symbol(name, &symbol))
                    }
                    other => Err(malformed(name, &other)),
                })
                .collect(),
            other => Err(malformed(name, &other)),
        }
    }

    fn optional_long(&mut self, name: &str) -> Result<Option<i64>, DecodeError> {
        match self.optional(name)? {
            None => Ok(None),
            Some(Value::Long(n) | Value::TimestampMillis(n)) => Ok(Some(n)),
            Some(other) => Err(malformed(name, &other)),
        }
    }

    fn strings(&mut self, name: &str) -> Result<Vec<String>, DecodeError> {
        match self.take(name)? {
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s),
                    other => Err(malformed(name, &other)),
                })
                .collect(),
            other => Err(malformed(name, &other)),
        }
    }

    fn optional_string(&mut self, name: &str) -> Result<Option<String>, DecodeError> {
        match self.optional(name)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(malformed(name, &other)),
        }
    }

    fn enter(&mut self, name: &str) -> Result<u32, DecodeError> {
        match self.take(name)? {
            Value::Union(branch, body) => {
                *self = Self::of(*body)?;
                Ok(branch)
            }
            other => Err(malformed(name, &other)),
        }
    }
}
