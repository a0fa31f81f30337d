//! The two writes a scheduler makes for every pod, a `pods/binding` and an
//! `events.k8s.io/v1` Event, in the API server's protobuf encoding, as client-go
//! sends them (kube-scheduler asks for `application/vnd.kubernetes.protobuf`).
//!
//! Why: through a real API server on two cores the API server's own CPU is the
//! limit, and decoding a JSON request body and encoding a JSON response (the created
//! Event comes back whole) cost it several times what protobuf does. kube's client
//! speaks JSON only, so these two messages are written here: the few fields a
//! scheduler sets, with the tags of `k8s.io/api` and `k8s.io/apimachinery`'s
//! `generated.proto`, in the `k8s\0` + `runtime.Unknown` envelope. A server that
//! refuses the media type (415) makes the caller fall back to JSON.

use prost::Message;

/// The media type of Kubernetes' protobuf encoding.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The envelope's magic prefix.
const MAGIC: &[u8; 4] = b"k8s\0";

/// `runtime.TypeMeta`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `runtime.Unknown`: the envelope around every object.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub raw: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

/// `meta/v1.ObjectMeta`, the fields a scheduler's writes set.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
}

/// `core/v1.ObjectReference`.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
}

/// `core/v1.Binding`.
#[derive(Clone, PartialEq, Message)]
pub struct Binding {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub target: Option<ObjectReference>,
}

/// `meta/v1.MicroTime`.
#[derive(Clone, PartialEq, Message)]
pub struct MicroTime {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

/// `events/v1.Event`, the fields a scheduler's recorder sets.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub event_time: Option<MicroTime>,
    #[prost(string, optional, tag = "4")]
    pub reporting_controller: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub reporting_instance: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub action: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub reason: Option<String>,
    #[prost(message, optional, tag = "8")]
    pub regarding: Option<ObjectReference>,
    #[prost(string, optional, tag = "10")]
    pub note: Option<String>,
    #[prost(string, optional, tag = "11")]
    pub r#type: Option<String>,
}

/// `meta/v1.Status`, what a refused request answers.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// An object in the envelope: magic, then `Unknown{typeMeta, raw}`.
pub fn envelope(api_version: &str, kind: &str, object: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: None,
        content_type: None,
    };
    let mut out = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    out.extend_from_slice(MAGIC);
    // Cannot fail: a Vec grows to fit (prost only refuses a full fixed buffer).
    let _ = unknown.encode(&mut out);
    out
}

/// The `Status` in a protobuf error body; `None` when the body is not one (a proxy's
/// text, a truncated reply): the caller reports the HTTP status alone.
pub fn decode_status(body: &[u8]) -> Option<Status> {
    let rest = body.strip_prefix(MAGIC)?;
    let unknown = Unknown::decode(rest).ok()?;
    if unknown.type_meta.as_ref()?.kind.as_deref() != Some("Status") {
        return None;
    }
    Status::decode(unknown.raw.as_deref()?).ok()
}

/// A Binding of `namespace/name` (with its UID, so a new pod of the same name is not
/// bound by mistake) to `node`.
pub fn binding(namespace: &str, name: &str, uid: &str, node: &str) -> Vec<u8> {
    let b = Binding {
        metadata: Some(ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            uid: Some(uid.into()),
        }),
        target: Some(ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        }),
    };
    envelope("v1", "Binding", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire bytes, tag by tag: a wrong tag number is a field the API server
    /// drops or misreads, so these are spelled out against `generated.proto`.
    #[test]
    fn binding_bytes_follow_the_generated_proto_tags() {
        let raw = Binding {
            metadata: Some(ObjectMeta {
                name: Some("p".into()),
                namespace: Some("d".into()),
                uid: Some("u".into()),
            }),
            target: Some(ObjectReference {
                kind: Some("Node".into()),
                name: Some("n".into()),
                ..ObjectReference::default()
            }),
        }
        .encode_to_vec();
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            0x0a, 9, // metadata = 1
              0x0a, 1, b'p', // name = 1
              0x1a, 1, b'd', // namespace = 3
              0x2a, 1, b'u', // uid = 5
            0x12, 9, // target = 2
              0x0a, 4, b'N', b'o', b'd', b'e', // kind = 1
              0x1a, 1, b'n', // name = 3
        ];
        assert_eq!(raw, want);
        let whole = binding("d", "p", "u", "n");
        assert_eq!(&whole[..4], b"k8s\0");
        let u = Unknown::decode(&whole[4..]).unwrap();
        assert_eq!(u.type_meta.unwrap().kind.as_deref(), Some("Binding"));
        let b = Binding::decode(u.raw.as_deref().unwrap()).unwrap();
        assert_eq!(b.target.unwrap().api_version.as_deref(), Some("v1"));
    }

    #[test]
    fn event_tags_follow_the_generated_proto() {
        let raw = Event {
            event_time: Some(MicroTime {
                seconds: Some(1),
                nanos: Some(2),
            }),
            reporting_controller: Some("c".into()),
            reporting_instance: Some("i".into()),
            action: Some("a".into()),
            reason: Some("r".into()),
            note: Some("n".into()),
            r#type: Some("t".into()),
            ..Event::default()
        }
        .encode_to_vec();
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            0x12, 4, 0x08, 1, 0x10, 2, // eventTime = 2 {seconds = 1, nanos = 2}
            0x22, 1, b'c', // reportingController = 4
            0x2a, 1, b'i', // reportingInstance = 5
            0x32, 1, b'a', // action = 6
            0x3a, 1, b'r', // reason = 7
            0x52, 1, b'n', // note = 10
            0x5a, 1, b't', // type = 11
        ];
        assert_eq!(raw, want);
    }

    #[test]
    fn a_status_reads_back_and_anything_else_is_none() {
        let s = Status {
            status: Some("Failure".into()),
            message: Some("pods \"p\" is forbidden".into()),
            reason: Some("Forbidden".into()),
            code: Some(403),
        };
        let body = envelope("v1", "Status", &s);
        assert_eq!(decode_status(&body), Some(s));
        assert_eq!(decode_status(b"{\"kind\":\"Status\"}"), None);
        assert_eq!(decode_status(b"k8s\0\xff\xff"), None);
        let not_status = envelope("v1", "Binding", &Binding::default());
        assert_eq!(decode_status(&not_status), None);
    }
}
