//! Static types, as the checker and the function table see them.

/// Static types, as far as this checker tracks them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ty {
    Dyn,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    List,
    /// A map with string keys and the given value type.
    Map(Box<Ty>),
    Quantity,
    Semver,
    Optional,
    Device,
}

impl Ty {
    pub(crate) fn name(&self) -> String {
        match self {
            Ty::Dyn => "dyn".into(),
            Ty::Null => "null_type".into(),
            Ty::Bool => "bool".into(),
            Ty::Int => "int".into(),
            Ty::Uint => "uint".into(),
            Ty::Double => "double".into(),
            Ty::String => "string".into(),
            Ty::Bytes => "bytes".into(),
            Ty::List => "list(dyn)".into(),
            Ty::Map(v) => format!("map(string, {})", v.name()),
            Ty::Quantity => "kubernetes.Quantity".into(),
            Ty::Semver => "kubernetes.Semver".into(),
            Ty::Optional => "optional_type(dyn)".into(),
            Ty::Device => "kubernetes.DRADevice".into(),
        }
    }
}
