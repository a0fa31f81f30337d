//! Process-wide interned strings for the texts a Filter repeats on every node it rejects:
//! plugin names and reasons such as `Insufficient example.com/gpu`. A `&'static str` is
//! copied without touching a shared reference count, so thousands of rejections per cycle
//! on two threads cost no atomic traffic and no allocation.
//!
//! Both tables are bounded, so hostile input cannot grow them without limit. Plugin names
//! come from configuration and sidecar handshakes (a sidecar's Permit decision names
//! one); past [`MAX_PLUGIN_NAMES`] a new name reads as [`OVERFLOW_NAME`]. Past
//! [`MAX_INTERNED_REASONS`] a reason is returned owned (allocated per use).

use std::borrow::{Borrow, Cow};
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::sync::{Mutex, OnceLock};

/// Distinct reasons kept for the life of the process (at most about 1 MiB of text).
pub const MAX_INTERNED_REASONS: usize = 16_384;
/// Distinct plugin names kept; far above any configuration's.
pub const MAX_PLUGIN_NAMES: usize = 4_096;
/// What a plugin name reads as once [`MAX_PLUGIN_NAMES`] are taken.
pub static OVERFLOW_NAME: &str = "(too many plugin names)";
/// Longest reason interned; longer ones are returned owned.
const MAX_REASON_LEN: usize = 256;

fn table(which: usize) -> &'static Mutex<HashSet<&'static str>> {
    static TABLES: OnceLock<[Mutex<HashSet<&'static str>>; 2]> = OnceLock::new();
    &TABLES.get_or_init(|| [Mutex::default(), Mutex::default()])[which]
}

fn intern_in(which: usize, s: &str, cap: usize) -> Option<&'static str> {
    let mut t = table(which).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&k) = t.get(s) {
        return Some(k);
    }
    if t.len() >= cap {
        return None;
    }
    let k: &'static str = Box::leak(s.to_owned().into_boxed_str());
    t.insert(k);
    Some(k)
}

/// `s` as a shared static text when the reason table has room, else owned. Call it once
/// per pod or per configuration, not per node: it takes a lock.
pub fn reason(s: &str) -> Cow<'static, str> {
    if s.len() <= MAX_REASON_LEN {
        if let Some(k) = intern_in(1, s, MAX_INTERNED_REASONS) {
            return Cow::Borrowed(k);
        }
    }
    Cow::Owned(s.to_owned())
}

/// A plugin's name, interned: `Copy`, hashed and ordered as its text, compared by
/// address (one text has one address, as every value comes from [`PluginName::new`]).
#[derive(Clone, Copy, PartialOrd, Ord)]
pub struct PluginName(&'static str);

impl PartialEq for PluginName {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for PluginName {}

impl std::hash::Hash for PluginName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As the text, so a set of names can be searched by `&str`.
        self.0.hash(state)
    }
}

impl PluginName {
    pub fn new(name: &str) -> Self {
        PluginName(intern_in(0, name, MAX_PLUGIN_NAMES).unwrap_or(OVERFLOW_NAME))
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl From<&str> for PluginName {
    fn from(s: &str) -> Self {
        PluginName::new(s)
    }
}

impl Deref for PluginName {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

impl Borrow<str> for PluginName {
    fn borrow(&self) -> &str {
        self.0
    }
}

impl AsRef<str> for PluginName {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl PartialEq<str> for PluginName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for PluginName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Debug for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_intern_to_one_copy() {
        let a = PluginName::new("NodeResourcesFit");
        let b = PluginName::new(&String::from("NodeResourcesFit"));
        assert!(std::ptr::eq(a.as_str(), b.as_str()));
        assert_eq!(a, "NodeResourcesFit");
        let set: HashSet<PluginName> = [a].into();
        assert!(set.contains("NodeResourcesFit"));
    }

    #[test]
    fn reasons_intern_until_too_long() {
        let r = reason("Insufficient example.com/gpu");
        assert!(matches!(r, Cow::Borrowed("Insufficient example.com/gpu")));
        let long = "x".repeat(MAX_REASON_LEN + 1);
        assert!(matches!(reason(&long), Cow::Owned(_)));
    }
}
