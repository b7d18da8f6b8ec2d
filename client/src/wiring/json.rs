//! A JSON value that keeps its objects' key order, so that a host's config file is written back
//! with everything else in it where it was. (serde_json's `preserve_order` feature would do the
//! same, but features unify across the workspace: it would change the key order of every
//! `serde_json::Map` cordond and the audit log write.)

use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// One JSON value; objects in file order (a repeated key keeps its last value, as JSON.parse).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(IndexMap<String, Json>),
}

impl Json {
    pub(crate) fn object() -> Json {
        Json::Object(IndexMap::new())
    }

    pub(crate) fn str(s: &str) -> Json {
        Json::String(s.to_string())
    }

    /// An object of `(key, value)` pairs in this order.
    pub(crate) fn obj<const N: usize>(pairs: [(&str, Json); N]) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    pub(crate) fn strings(items: &[String]) -> Json {
        Json::Array(items.iter().map(|s| Json::String(s.clone())).collect())
    }

    pub(crate) fn as_object_mut(&mut self) -> Option<&mut IndexMap<String, Json>> {
        match self {
            Json::Object(m) => Some(m),
            _ => None,
        }
    }

    pub(crate) fn as_object(&self) -> Option<&IndexMap<String, Json>> {
        match self {
            Json::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The JSON type's name, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "a boolean",
            Json::Number(_) => "a number",
            Json::String(_) => "a string",
            Json::Array(_) => "an array",
            Json::Object(_) => "an object",
        }
    }

    /// Whether any string in this value contains `needle`.
    pub(crate) fn mentions(&self, needle: &str) -> bool {
        match self {
            Json::String(s) => s.contains(needle),
            Json::Array(items) => items.iter().any(|v| v.mentions(needle)),
            Json::Object(m) => m.values().any(|v| v.mentions(needle)),
            _ => false,
        }
    }

    /// Pretty text (two spaces, as the hosts write their files) with a final newline.
    pub(crate) fn pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// As a serde_json value (for `--json` output; key order is serde_json's there).
    pub(crate) fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v).map(Json::Number).ok_or_else(|| E::custom("a number JSON cannot hold"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut m = IndexMap::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            m.insert(k, v);
        }
        Ok(Json::Object(m))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_values() {
        let text = r#"{"z": 1, "a": {"y": [true, null, 1.5, -3], "b": "s"}, "m": 18446744073709551615}"#;
        let v: Json = serde_json::from_str(text).unwrap_or(Json::Null);
        let back = serde_json::to_string(&v).unwrap_or_default();
        assert_eq!(back, r#"{"z":1,"a":{"y":[true,null,1.5,-3],"b":"s"},"m":18446744073709551615}"#);
    }
}
