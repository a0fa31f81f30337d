//! Semantic versions with blang/semver's strict parser (what the Kubernetes
//! CEL semver library uses) and semver 2.0 precedence.

use std::cmp::Ordering;
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum PreId {
    Num(u64),
    Alpha(String),
}

/// A parsed `major.minor.patch[-pre][+build]` version.
///
/// Equality and ordering follow semver precedence, so build metadata is
/// ignored (`1.0.0+a == 1.0.0+b`), as in blang/semver's `Equals`/`Compare`.
#[derive(Clone, Debug)]
pub struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<PreId>,
    build: Vec<String>,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

fn parse_num(s: &str, what: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {what} number {s:?}"));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!(
            "{what} number must not contain leading zeroes {s:?}"
        ));
    }
    s.parse()
        .map_err(|_| format!("{what} number out of range {s:?}"))
}

impl Semver {
    /// Strict parse: no `v` prefix, no missing components, no leading zeros.
    pub fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".to_string());
        }
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() != 3 {
            return Err("No Major.Minor.Patch elements found".to_string());
        }
        let major = parse_num(parts[0], "Major")?;
        let minor = parse_num(parts[1], "Minor")?;
        let patch = parse_num(parts[2], "Patch")?;
        let mut pre_ids = Vec::new();
        if let Some(pre) = pre {
            for id in pre.split('.') {
                if id.is_empty() {
                    return Err("Prerelease is empty".to_string());
                }
                if !id.chars().all(is_ident_char) {
                    return Err(format!("Invalid character(s) found in prerelease {id:?}"));
                }
                if id.bytes().all(|c| c.is_ascii_digit()) {
                    if id.len() > 1 && id.starts_with('0') {
                        return Err(format!(
                            "Numeric PreRelease version must not contain leading zeroes {id:?}"
                        ));
                    }
                    let n = id
                        .parse()
                        .map_err(|_| format!("prerelease number out of range {id:?}"))?;
                    pre_ids.push(PreId::Num(n));
                } else {
                    pre_ids.push(PreId::Alpha(id.to_string()));
                }
            }
        }
        let mut build_ids = Vec::new();
        if let Some(build) = build {
            for id in build.split('.') {
                if id.is_empty() || !id.chars().all(is_ident_char) {
                    return Err(format!(
                        "Invalid character(s) found in build meta data {id:?}"
                    ));
                }
                build_ids.push(id.to_string());
            }
        }
        Ok(Semver {
            major,
            minor,
            patch,
            pre: pre_ids,
            build: build_ids,
        })
    }

    pub fn major(&self) -> u64 {
        self.major
    }
    pub fn minor(&self) -> u64 {
        self.minor
    }
    pub fn patch(&self) -> u64 {
        self.patch
    }
}

impl PartialEq for Semver {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Semver {}

impl PartialOrd for Semver {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Semver {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(o.major, o.minor, o.patch))
            .then_with(|| match (self.pre.is_empty(), o.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                // A pre-release has lower precedence than the release.
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => {
                    for (a, b) in self.pre.iter().zip(o.pre.iter()) {
                        let c = match (a, b) {
                            (PreId::Num(x), PreId::Num(y)) => x.cmp(y),
                            (PreId::Num(_), PreId::Alpha(_)) => Ordering::Less,
                            (PreId::Alpha(_), PreId::Num(_)) => Ordering::Greater,
                            (PreId::Alpha(x), PreId::Alpha(y)) => x.cmp(y),
                        };
                        if c != Ordering::Equal {
                            return c;
                        }
                    }
                    self.pre.len().cmp(&o.pre.len())
                }
            })
    }
}

impl fmt::Display for Semver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        for (i, p) in self.pre.iter().enumerate() {
            f.write_str(if i == 0 { "-" } else { "." })?;
            match p {
                PreId::Num(n) => write!(f, "{n}")?,
                PreId::Alpha(s) => f.write_str(s)?,
            }
        }
        for (i, b) in self.build.iter().enumerate() {
            f.write_str(if i == 0 { "+" } else { "." })?;
            f.write_str(b)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Semver {
        Semver::parse(s).unwrap()
    }

    #[test]
    fn parsing() {
        assert_eq!(v("1.2.3").to_string(), "1.2.3");
        assert_eq!(v("1.2.3-rc.1+build.5").to_string(), "1.2.3-rc.1+build.5");
        for bad in [
            "",
            "1",
            "1.2",
            "v1.2.3",
            "01.2.3",
            "1.2.3-",
            "1.2.3-01",
            "1.2.3+",
            "1.2.3-a..b",
            "1.2.x",
            "1.2.3.4",
            "1.2.3-é",
        ] {
            assert!(Semver::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn precedence() {
        let order = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.1.0",
            "2.0.0",
        ];
        for w in order.windows(2) {
            assert!(v(w[0]) < v(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(v("1.0.0+a"), v("1.0.0+b"));
    }
}
