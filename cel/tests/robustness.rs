//! Hostile-input tests: runaway expressions hit the cost limit quickly, deep
//! nesting is an error rather than a stack overflow, and garbage input never
//! panics.

use std::time::{Duration, Instant};

use switchyard_cel::{
    AttributeValue, CompileError, DeviceValue, EvalError, Program, Quantity, Semver,
    DEFAULT_COST_LIMIT, MAX_EXPRESSION_LEN,
};

fn device() -> DeviceValue {
    DeviceValue::new(
        "dra.example.com",
        vec![
            ("model".into(), AttributeValue::String("a100".into())),
            ("cores".into(), AttributeValue::Int(108)),
            (
                "v".into(),
                AttributeValue::Version(Semver::parse("1.0.0").unwrap()),
            ),
        ],
        vec![("memory".into(), Quantity::parse("40Gi").unwrap())],
        None,
    )
}

/// Compiles and runs `src`, asserting the cost limit is hit within a
/// fraction of a second (debug build).
fn assert_cost_limited(src: &str) {
    let p = Program::compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let start = Instant::now();
    let r = p.eval_device(&device(), DEFAULT_COST_LIMIT);
    let took = start.elapsed();
    assert_eq!(r, Err(EvalError::CostLimitExceeded), "{src}");
    assert_eq!(
        r.unwrap_err().to_string(),
        "operation cancelled: actual cost limit exceeded"
    );
    assert!(took < Duration::from_secs(2), "{src} took {took:?}");
}

#[test]
fn nested_comprehensions_hit_cost_limit() {
    assert_cost_limited("lists.range(1000).map(x, lists.range(1000).map(y, x * y)).size() > 0");
    assert_cost_limited(
        "lists.range(100).all(a, lists.range(100).all(b, lists.range(100).all(c, a + b + c >= 0)))",
    );
    let mut e = "[1,2,3,4,5,6,7,8,9,10]".to_string();
    for _ in 0..8 {
        e = format!("[1,2,3,4,5,6,7,8,9,10].map(x, {e})");
    }
    assert_cost_limited(&format!("{e}.size() > 0"));
}

#[test]
fn doubling_hits_cost_limit() {
    // String doubling through nested binds: 2^40 bytes if unbounded.
    let mut s = "s.size() > 0".to_string();
    for _ in 0..40 {
        s = format!("cel.bind(s, s + s, {s})");
    }
    assert_cost_limited(&format!("cel.bind(s, 'abcdefghij', {s})"));
    // List doubling.
    let mut l = "l.size() > 0".to_string();
    for _ in 0..40 {
        l = format!("cel.bind(l, l + l, {l})");
    }
    assert_cost_limited(&format!("cel.bind(l, [1, 2, 3, 4], {l})"));
    // Shared-structure blowup makes deep equality exponential.
    let mut n = "n == n".to_string();
    for _ in 0..40 {
        n = format!("cel.bind(n, [n, n], {n})");
    }
    assert_cost_limited(&format!("cel.bind(n, [1], {n})"));
    // Replace/join amplification.
    assert_cost_limited(
        "cel.bind(s, 'x'.replace('', 'xxxxxxxxxx'), cel.bind(t, s.replace('', s), cel.bind(u, t.replace('', t), cel.bind(v, u.replace('', u), v.size() > 0))))",
    );
    assert_cost_limited("lists.range(9223372036854775807).size() > 0");
}

#[test]
fn cost_limit_is_respected_exactly_enough() {
    let p = Program::compile("lists.range(100).all(x, x >= 0)").unwrap();
    assert_eq!(p.eval_device(&device(), DEFAULT_COST_LIMIT), Ok(true));
    assert_eq!(
        p.eval_device(&device(), 50),
        Err(EvalError::CostLimitExceeded)
    );
    // The cost limit error is not absorbed by logical operators.
    let p = Program::compile("true || lists.range(100000).size() > 0").unwrap();
    assert_eq!(p.eval_device(&device(), 10), Ok(true));
    let p = Program::compile("lists.range(100000).size() > 0 || true").unwrap();
    assert_eq!(
        p.eval_device(&device(), 10),
        Err(EvalError::CostLimitExceeded)
    );
}

#[test]
fn deep_nesting_is_an_error() {
    for src in [
        "(".repeat(10_000),
        format!("{}true{}", "(".repeat(10_000), ")".repeat(10_000)),
        format!("{}true", "!".repeat(10_000)),
        format!("{}1 > 0", "-".repeat(10_000)),
        format!("{}1{} == [1]", "[".repeat(5_000), "]".repeat(5_000)),
        format!("{} == 1", vec!["1"; 3_000].join(" + ")),
        format!("{}1{}", "{1:".repeat(3_000), "}".repeat(3_000)),
        "a.".repeat(4_000) + "b",
    ] {
        let src = &src[..src.len().min(MAX_EXPRESSION_LEN)];
        match Program::compile(src) {
            Err(CompileError::TooDeep { .. } | CompileError::Syntax { .. }) => {}
            other => panic!("{:.40}: {other:?}", src),
        }
    }
    // Long flat `||` chains are fine.
    let ors = vec!["device.driver == 'x'"; 400].join(" || ");
    assert!(Program::compile(&ors).is_ok());
}

#[test]
fn overlong_expression_rejected() {
    let src = format!("'{}' == ''", "a".repeat(MAX_EXPRESSION_LEN));
    assert!(matches!(
        Program::compile(&src),
        Err(CompileError::TooLong { .. })
    ));
}

/// xorshift64* — enough randomness for a smoke fuzz without dependencies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const FRAGMENTS: &[&str] = &[
    "device",
    ".",
    "attributes",
    "capacity",
    "driver",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    ",",
    ":",
    "?",
    "'dra.example.com'",
    "\"model\"",
    "model",
    "cores",
    "1",
    "0",
    "-",
    "+",
    "*",
    "/",
    "%",
    "==",
    "!=",
    "<",
    ">=",
    "&&",
    "||",
    "!",
    "in",
    "true",
    "null",
    "2.5",
    "7u",
    "0x1f",
    "x",
    "y",
    ".all(x, ",
    ".exists(x, ",
    ".map(x, ",
    ".filter(x, ",
    "cel.bind(x, ",
    "has(",
    "size(",
    "quantity('1Gi')",
    "semver('1.0.0')",
    ".compareTo(",
    ".isGreaterThan(",
    ".?",
    "[?",
    ".orValue(",
    "optional.of(",
    ".split(','",
    ".join(",
    "'a,b'",
    "lists.range(",
    ".matches(",
    "'^a.*$'",
    "b'\\x00'",
    "r'\\d'",
    "'''",
    "\\",
    "'\\u00e9'",
    "9223372036854775807",
    "sets.contains(",
    ".sum()",
    ".distinct()",
    ".flatten()",
    ".slice(",
    ".substring(",
    ".replace(",
    "dyn(",
    "int(",
    "string(",
    " ",
];

#[test]
fn fuzz_compile_and_eval_never_panics() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let dev = device();
    let mut compiled = 0;
    for i in 0..20_000 {
        let src: String = if i % 3 == 0 {
            // Raw garbage bytes (lossily decoded).
            let n = rng.below(64);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            let n = 1 + rng.below(24);
            (0..n)
                .map(|_| FRAGMENTS[rng.below(FRAGMENTS.len())])
                .collect()
        };
        if let Ok(p) = Program::compile(&src) {
            compiled += 1;
            let _ = p.eval_device(&dev, 100_000);
        }
    }
    assert!(compiled > 0);
}

#[test]
fn fuzz_mutated_valid_expressions() {
    let seeds = [
        "device.attributes['dra.example.com'].model == 'a100'",
        "device.capacity['dra.example.com'].memory.compareTo(quantity('10Gi')) >= 0",
        "[1, 2, 3].map(x, x * 2).exists(y, y == 4)",
        "cel.bind(a, device.attributes['dra.example.com'], a.?cores.orValue(0) > 100)",
        "'a,b,c'.split(',').join('-').matches('^a')",
    ];
    let mut rng = Rng(42);
    let dev = device();
    for _ in 0..5_000 {
        let mut b: Vec<u8> = seeds[rng.below(seeds.len())].as_bytes().to_vec();
        for _ in 0..1 + rng.below(4) {
            let pos = rng.below(b.len() + 1);
            match rng.below(3) {
                0 if pos < b.len() => {
                    b.remove(pos);
                }
                1 => {
                    let alphabet = b"()[]{}.,'\"!-+*/%<>=&|?:0123456789xu\\";
                    b.insert(pos, alphabet[rng.below(alphabet.len())])
                }
                _ if pos < b.len() => b[pos] = rng.next() as u8,
                _ => {}
            }
        }
        let src = String::from_utf8_lossy(&b);
        if let Ok(p) = Program::compile(&src) {
            let _ = p.eval_device(&dev, DEFAULT_COST_LIMIT);
        }
    }
}
