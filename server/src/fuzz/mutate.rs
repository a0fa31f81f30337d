//! The mutator: one field of a parsed seed made hostile (values from the edges of
//! every type, or a donor's), or byte-level damage, re-serialised as JSON or YAML.

use super::*;

/// xorshift64*: deterministic per seed, no dependency.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values from the edges of every type a field can hold.
pub(super) fn hostile_value(rng: &mut Rng) -> Value {
    const STRINGS: &[&str] = &[
        "",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "1e2147483647",
        "0.1e-2147483648",
        "1e-2147483649",
        "1e300",
        "100Ei",
        "-1",
        "0",
        "NaN",
        "1.5.5",
        "2562048h",
        "9999999999999999999999s",
        "-1s",
        "0.000000001n",
        "$count",
        "../../etc/passwd",
        "/etc/hostname",
        "a/b/c/d",
        "UPPER",
        "naïve",
        "\u{0}",
        "---",
        "*ref",
        "{{.Index}}",
        "In",
        "Gt",
        "Exists",
        "NoSchedule",
        "NoExecute",
        "Always",
        "kubernetes.io/hostname",
        "metadata.name",
    ];
    match rng.below(12) {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => Value::from(i64::MAX),
        3 => Value::from(i64::MIN),
        4 => Value::from(-1),
        5 => serde_json::Number::from_f64(1e300).map_or(Value::Null, Value::Number),
        6 => Value::from(u64::MAX),
        7 => Value::String("x".repeat(1 + rng.below(70_000))),
        8 => Value::Array(Vec::new()),
        9 => Value::Object(Default::default()),
        10 => Value::from(rng.below(3) as i64),
        _ => Value::String(STRINGS[rng.below(STRINGS.len())].to_string()),
    }
}

/// Every path to a value in `v`, for picking one.
pub(super) fn paths(v: &Value, prefix: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(prefix.clone());
    if out.len() > 20_000 {
        return;
    }
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                prefix.push(PathStep::Key(k.clone()));
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                prefix.push(PathStep::Index(i));
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
pub(super) enum PathStep {
    Key(String),
    Index(usize),
}

pub(super) fn at_mut<'a>(v: &'a mut Value, path: &[PathStep]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (PathStep::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (PathStep::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// One structure-aware mutation of `v`.
pub(super) fn mutate_value(v: &mut Value, rng: &mut Rng, donors: &[Value]) {
    let mut all = Vec::new();
    paths(v, &mut Vec::new(), &mut all);
    let path = all[rng.below(all.len())].clone();
    let op = rng.below(10);
    // Removing a key needs the parent.
    if op == 0 && !path.is_empty() {
        let (last, parent) = path.split_last().expect("non-empty path");
        if let Some(p) = at_mut(v, parent) {
            match (last, p) {
                (PathStep::Key(k), Value::Object(m)) => {
                    m.remove(k);
                }
                (PathStep::Index(i), Value::Array(a)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
        return;
    }
    let donor = (!donors.is_empty()).then(|| {
        let d = &donors[rng.below(donors.len())];
        let mut dp = Vec::new();
        paths(d, &mut Vec::new(), &mut dp);
        let p = &dp[rng.below(dp.len())];
        let mut d = d.clone();
        at_mut(&mut d, p).map(|x| x.take()).unwrap_or(Value::Null)
    });
    let Some(target) = at_mut(v, &path) else {
        return;
    };
    match op {
        1 => {
            // Duplicate a list entry many times (millions of labels, huge lists).
            if let Value::Array(a) = target {
                if let Some(first) = a.first().cloned() {
                    let n = [2, 100, 5000][rng.below(3)];
                    a.extend(std::iter::repeat_n(first, n));
                }
            } else if let Value::Object(m) = target {
                let n = [2, 100, 5000][rng.below(3)];
                for i in 0..n {
                    m.insert(
                        format!("k{i}.example.com/x{i}"),
                        Value::String(format!("v{i}")),
                    );
                }
            }
        }
        2 => {
            // Deep nesting.
            let mut x = target.take();
            for _ in 0..[5, 60, 300][rng.below(3)] {
                x = Value::Array(vec![x]);
            }
            *target = x;
        }
        3 | 4 => {
            if let Some(d) = donor {
                *target = d;
            }
        }
        5 => {
            // Numbers near their edges, kept as the same JSON type when possible.
            let new = match &mut *target {
                Value::Number(n) if n.is_i64() => {
                    let x = n.as_i64().unwrap_or(0);
                    Value::from(
                        [
                            x.wrapping_neg(),
                            x.saturating_mul(1 << 20),
                            i64::MAX,
                            i32::MAX as i64 + 1,
                            0,
                        ][rng.below(5)],
                    )
                }
                Value::String(s) => {
                    let mut s = s.clone();
                    match rng.below(4) {
                        0 => s.push_str("e2147483647"),
                        1 => s.insert(0, '-'),
                        2 => s = s.repeat(3),
                        _ => s.push_str("Ei"),
                    }
                    Value::String(s)
                }
                other => other.take(),
            };
            *target = new;
        }
        _ => *target = hostile_value(rng),
    }
}

/// Byte-level damage to a text.
pub(super) fn mutate_bytes(text: &str, rng: &mut Rng) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            b.push(b'{');
        }
        let i = rng.below(b.len());
        match rng.below(6) {
            0 => b[i] ^= 1 << rng.below(8),
            1 => {
                b.remove(i);
            }
            2 => {
                const SPECIAL: &[u8] = b"&*:-[]{}!|>'\"\n\t #%@`";
                b.insert(i, SPECIAL[rng.below(SPECIAL.len())]);
            }
            3 => {
                let j = (i + rng.below(64)).min(b.len());
                let chunk = b[i..j].to_vec();
                b.splice(i..i, chunk);
            }
            4 => b.truncate(i),
            _ => {
                let bomb = b"a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n";
                b.splice(i..i, bomb.iter().copied());
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

pub(super) fn serialise(v: &Value, yaml: bool) -> String {
    if yaml {
        serde_saphyr::to_string(v).unwrap_or_else(|_| v.to_string())
    } else {
        v.to_string()
    }
}
