//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`) for the
//! kinds a scheduler writes that way, as a v1.36 API server reads and writes it:
//! the `k8s\0` magic and a `runtime.Unknown` envelope (`apimachinery/pkg/runtime/
//! serializer/protobuf`), the object inside by the field numbers of `k8s.io/api`'s
//! and `apimachinery`'s `generated.proto`. Written from those files, apart from
//! Switchyard's own encoder, so a wrong field number on either side shows.
//!
//! A field number the type lacks is dropped by the server's generated decoder
//! without a word (field validation does not cover protobuf); the double reports it
//! so a test can refuse it. A wire type that does not fit the field is a 400.

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Map, Value};

#[derive(Clone, Copy)]
enum Ty {
    Str,
    Int,
    Bytes,
    /// `meta/v1.Time` (seconds in the JSON form).
    Time,
    /// `meta/v1.MicroTime` (microseconds in the JSON form).
    MicroTime,
    /// `map<string, string>`.
    Map,
    Msg(&'static [Field]),
}

struct Field {
    tag: u64,
    name: &'static str,
    ty: Ty,
    repeated: bool,
}

const fn f(tag: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        tag,
        name,
        ty,
        repeated: false,
    }
}

const fn many(tag: u64, name: &'static str, ty: Ty) -> Field {
    Field {
        tag,
        name,
        ty,
        repeated: true,
    }
}

const TYPE_META: &[Field] = &[f(1, "apiVersion", Ty::Str), f(2, "kind", Ty::Str)];
const UNKNOWN: &[Field] = &[
    f(1, "typeMeta", Ty::Msg(TYPE_META)),
    f(2, "raw", Ty::Bytes),
    f(3, "contentEncoding", Ty::Str),
    f(4, "contentType", Ty::Str),
];
const OBJECT_META: &[Field] = &[
    f(1, "name", Ty::Str),
    f(2, "generateName", Ty::Str),
    f(3, "namespace", Ty::Str),
    f(5, "uid", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "generation", Ty::Int),
    f(8, "creationTimestamp", Ty::Time),
    f(11, "labels", Ty::Map),
    f(12, "annotations", Ty::Map),
    many(14, "finalizers", Ty::Str),
];
const OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Ty::Str),
    f(2, "namespace", Ty::Str),
    f(3, "name", Ty::Str),
    f(4, "uid", Ty::Str),
    f(5, "apiVersion", Ty::Str),
    f(6, "resourceVersion", Ty::Str),
    f(7, "fieldPath", Ty::Str),
];
const BINDING: &[Field] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "target", Ty::Msg(OBJECT_REFERENCE)),
];
const EVENT_SERIES: &[Field] = &[
    f(1, "count", Ty::Int),
    f(2, "lastObservedTime", Ty::MicroTime),
];
/// `events/v1.Event` (k8s.io/api/events/v1/generated.proto).
const EVENT: &[Field] = &[
    f(1, "metadata", Ty::Msg(OBJECT_META)),
    f(2, "eventTime", Ty::MicroTime),
    f(3, "series", Ty::Msg(EVENT_SERIES)),
    f(4, "reportingController", Ty::Str),
    f(5, "reportingInstance", Ty::Str),
    f(6, "action", Ty::Str),
    f(7, "reason", Ty::Str),
    f(8, "regarding", Ty::Msg(OBJECT_REFERENCE)),
    f(9, "related", Ty::Msg(OBJECT_REFERENCE)),
    f(10, "note", Ty::Str),
    f(11, "type", Ty::Str),
    f(15, "deprecatedCount", Ty::Int),
];
const STATUS: &[Field] = &[
    f(2, "status", Ty::Str),
    f(3, "message", Ty::Str),
    f(4, "reason", Ty::Str),
    f(6, "code", Ty::Int),
];

const MAGIC: &[u8] = b"k8s\0";

/// The media type of the encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The schema of a kind the double reads and writes in protobuf.
fn schema(kind: &str) -> Option<&'static [Field]> {
    match kind {
        "Binding" => Some(BINDING),
        "Event" => Some(EVENT),
        "Status" => Some(STATUS),
        _ => None,
    }
}

/// Whether the double takes `kind` in protobuf.
pub fn readable(kind: &str) -> bool {
    schema(kind).is_some()
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or("proto: unexpected EOF")?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Ok(v);
        }
    }
    Err("proto: integer overflow".into())
}

fn time_json(fields: &[u8], micro: bool) -> Result<Value, String> {
    let (mut seconds, mut nanos, mut i) = (0i64, 0i32, 0);
    while i < fields.len() {
        let key = varint(fields, &mut i)?;
        let v = varint(fields, &mut i)?;
        match key {
            0x08 => seconds = v as i64,
            0x10 => nanos = v as i32,
            _ => return Err(format!("proto: bad Timestamp field {key:#x}")),
        }
    }
    let t = Timestamp::new(seconds, if micro { nanos / 1000 * 1000 } else { 0 })
        .map_err(|e| format!("proto: bad time: {e}"))?;
    Ok(json!(if micro {
        t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
    } else {
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }))
}

/// Decodes a message into its JSON form; `dropped` collects field numbers the type
/// lacks (`path#tag`).
fn decode(b: &[u8], s: &[Field], path: &str, dropped: &mut Vec<String>) -> Result<Value, String> {
    let mut out = Map::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let (tag, wire) = (key >> 3, key & 7);
        let value: &[u8];
        let mut number = 0u64;
        match wire {
            0 => number = varint(b, &mut i)?,
            2 => {
                let n = varint(b, &mut i)? as usize;
                value = b.get(i..i + n).ok_or("proto: unexpected EOF")?;
                i += n;
                let Some(field) = s.iter().find(|f| f.tag == tag) else {
                    dropped.push(format!("{path}#{tag}"));
                    continue;
                };
                let p = if path.is_empty() {
                    field.name.to_string()
                } else {
                    format!("{path}.{}", field.name)
                };
                let v = match field.ty {
                    Ty::Str => json!(String::from_utf8(value.to_vec())
                        .map_err(|_| format!("proto: {p}: not UTF-8"))?),
                    Ty::Bytes => json!(value.iter().map(|b| json!(b)).collect::<Vec<_>>()),
                    Ty::Time => time_json(value, false)?,
                    Ty::MicroTime => time_json(value, true)?,
                    Ty::Msg(inner) => decode(value, inner, &p, dropped)?,
                    Ty::Map => {
                        let e = decode(
                            value,
                            &[f(1, "key", Ty::Str), f(2, "value", Ty::Str)],
                            &p,
                            dropped,
                        )?;
                        let m = out.entry(field.name).or_insert_with(|| json!({}));
                        m[e["key"].as_str().unwrap_or_default()] = e["value"].clone();
                        continue;
                    }
                    Ty::Int => {
                        return Err(format!(
                            "proto: wrong wireType = 2 for field {}",
                            field.name
                        ))
                    }
                };
                if field.repeated {
                    let list = out.entry(field.name).or_insert_with(|| json!([]));
                    if let Some(a) = list.as_array_mut() {
                        a.push(v);
                    }
                } else {
                    out.insert(field.name.to_string(), v);
                }
                continue;
            }
            1 => i += 8,
            5 => i += 4,
            w => return Err(format!("proto: illegal wireType {w}")),
        }
        match s.iter().find(|f| f.tag == tag) {
            None => dropped.push(format!("{path}#{tag}")),
            Some(field) if matches!(field.ty, Ty::Int) && wire == 0 => {
                // int32/int64 fields: two's complement in 64 bits.
                out.insert(field.name.to_string(), json!(number as i64));
            }
            Some(field) => {
                return Err(format!(
                    "proto: wrong wireType = {wire} for field {}",
                    field.name
                ))
            }
        }
    }
    Ok(Value::Object(out))
}

/// A request body: the envelope's kind must be `kind` (or the body is refused as
/// the server refuses it); the object comes back in its JSON form, with the field
/// numbers the server would drop.
pub fn decode_body(
    body: &[u8],
    api_version: &str,
    kind: &str,
) -> Result<(Value, Vec<String>), String> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or("provided input did not begin with the protobuf magic prefix")?;
    let mut ignored = Vec::new();
    let unknown = decode(rest, UNKNOWN, "", &mut ignored)?;
    let (got_version, got_kind) = (
        unknown["typeMeta"]["apiVersion"].as_str().unwrap_or(""),
        unknown["typeMeta"]["kind"].as_str().unwrap_or(""),
    );
    if got_kind != kind || got_version != api_version {
        return Err(format!(
            "the body is a {got_version}/{got_kind}, not a {api_version}/{kind}"
        ));
    }
    let raw: Vec<u8> = unknown["raw"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b.as_u64().map(|b| b as u8))
        .collect();
    let s = schema(kind).ok_or_else(|| format!("no protobuf schema for {kind}"))?;
    let mut dropped = Vec::new();
    let mut object = decode(&raw, s, "", &mut dropped)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok((object, dropped))
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, tag: u64, b: &[u8]) {
    put_varint(out, (tag << 3) | 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn encode(v: &Value, s: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for field in s {
        let x = &v[field.name];
        if x.is_null() {
            continue;
        }
        let items: Vec<&Value> = match (field.repeated, x) {
            (true, Value::Array(a)) => a.iter().collect(),
            _ => vec![x],
        };
        for x in items {
            match field.ty {
                Ty::Str => put_bytes(&mut out, field.tag, x.as_str().unwrap_or("").as_bytes()),
                Ty::Int => {
                    put_varint(&mut out, field.tag << 3);
                    put_varint(&mut out, x.as_i64().unwrap_or(0) as u64);
                }
                Ty::Bytes => {}
                Ty::Time | Ty::MicroTime => {
                    let Some(t) = x.as_str().and_then(|t| t.parse::<Timestamp>().ok()) else {
                        continue;
                    };
                    let mut m = Vec::new();
                    put_varint(&mut m, 0x08);
                    put_varint(&mut m, t.as_second() as u64);
                    if t.subsec_nanosecond() != 0 {
                        put_varint(&mut m, 0x10);
                        put_varint(&mut m, t.subsec_nanosecond() as u64);
                    }
                    put_bytes(&mut out, field.tag, &m);
                }
                Ty::Map => {
                    for (k, val) in x.as_object().into_iter().flatten() {
                        let mut e = Vec::new();
                        put_bytes(&mut e, 1, k.as_bytes());
                        put_bytes(&mut e, 2, val.as_str().unwrap_or("").as_bytes());
                        put_bytes(&mut out, field.tag, &e);
                    }
                }
                Ty::Msg(inner) => put_bytes(&mut out, field.tag, &encode(x, inner)),
            }
        }
    }
    out
}

/// An answer in protobuf, when the double has the kind's schema.
pub fn encode_object(v: &Value) -> Option<Vec<u8>> {
    let kind = v["kind"].as_str()?;
    let s = schema(kind)?;
    let mut unknown = Vec::new();
    let mut tm = Vec::new();
    put_bytes(
        &mut tm,
        1,
        v["apiVersion"].as_str().unwrap_or("v1").as_bytes(),
    );
    put_bytes(&mut tm, 2, kind.as_bytes());
    put_bytes(&mut unknown, 1, &tm);
    put_bytes(&mut unknown, 2, &encode(v, s));
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&unknown);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_round_trips_and_foreign_field_numbers_are_reported() {
        let e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default", "labels": {"a": "b"}},
            "eventTime": "2026-11-27T10:00:00.123456Z", "reportingController": "c",
            "reportingInstance": "i", "action": "Binding", "reason": "Scheduled",
            "regarding": {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u"},
            "note": "n", "type": "Normal", "series": {"count": 2, "lastObservedTime": "2026-11-27T10:00:01.000000Z"}});
        let bytes = encode_object(&e).expect("encodable");
        let (back, dropped) = decode_body(&bytes, "events.k8s.io/v1", "Event").expect("decodes");
        assert_eq!(back, e);
        assert!(dropped.is_empty());
        // A field number Event lacks (12 is deprecatedSource, not modelled here; 99
        // is nothing) is dropped by the server: reported.
        let mut raw = encode(&e, EVENT);
        put_bytes(&mut raw, 99, b"x");
        let mut body = MAGIC.to_vec();
        let mut tm = Vec::new();
        put_bytes(&mut tm, 1, b"events.k8s.io/v1");
        put_bytes(&mut tm, 2, b"Event");
        put_bytes(&mut body, 1, &tm);
        put_bytes(&mut body, 2, &raw);
        assert_eq!(
            decode_body(&body, "events.k8s.io/v1", "Event").unwrap().1,
            ["#99"]
        );
        // The wrong kind, or no magic, is refused.
        assert!(decode_body(&bytes, "v1", "Binding").is_err());
        assert!(decode_body(b"{}", "v1", "Binding").is_err());
        // A string field sent as a number is a wire-type error.
        let mut bad = Vec::new();
        put_varint(&mut bad, 1 << 3);
        put_varint(&mut bad, 5);
        let mut d = Vec::new();
        assert!(decode(&bad, OBJECT_META, "", &mut d).is_err());
    }
}
