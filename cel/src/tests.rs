//! End-to-end tests of the language subset through the public API.

use super::*;

fn device() -> DeviceValue {
    DeviceValue::new(
        "dra.example.com",
        vec![
            ("model".into(), AttributeValue::String("a100".into())),
            ("cores".into(), AttributeValue::Int(108)),
            ("healthy".into(), AttributeValue::Bool(true)),
            (
                "driverVersion".into(),
                AttributeValue::Version(Semver::parse("1.2.3").unwrap()),
            ),
            (
                "gpu.example.com/family".into(),
                AttributeValue::String("ampere".into()),
            ),
        ],
        vec![
            ("memory".into(), Quantity::parse("40Gi").unwrap()),
            (
                "gpu.example.com/slices".into(),
                Quantity::parse("7").unwrap(),
            ),
        ],
        Some(true),
    )
}

fn run(src: &str) -> Result<bool, EvalError> {
    let p = Program::compile(src).unwrap_or_else(|e| panic!("compile {src}: {e}"));
    p.eval_device(&device(), DEFAULT_COST_LIMIT)
}

fn t(src: &str) {
    assert_eq!(run(src), Ok(true), "{src}");
}

fn f(src: &str) {
    assert_eq!(run(src), Ok(false), "{src}");
}

fn eval_err(src: &str) -> String {
    match run(src) {
        Err(e) => e.to_string(),
        Ok(v) => panic!("{src}: expected error, got {v}"),
    }
}

fn compile_err(src: &str) -> String {
    match Program::compile(src) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{src}: expected compile error"),
    }
}

#[test]
fn precedence_and_arithmetic() {
    t("1 + 2 * 3 == 7");
    t("(1 + 2) * 3 == 9");
    t("10 - 4 - 3 == 3");
    t("7 / 2 == 3 && 7 % 3 == 1 && -7 / 2 == -3");
    t("true ? 1 == 1 : false");
    t("false ? false : true ? true : false");
    t("!false && !!true");
    t("1 < 2 == true");
    t("2 in [1, 2, 3] && !(4 in [1, 2, 3])");
    t("'a' in {'a': 1}");
    t("-9223372036854775808 < 0");
    t("0x10 == 16 && 5u + 1u == 6u && 1.5 * 2.0 == 3.0");
    t("'ab' + 'cd' == 'abcd' && [1] + [2] == [1, 2] && b'a' + b'b' == b'ab'");
}

#[test]
fn heterogeneous_numbers() {
    t("1 == 1.0 && 1 == 1u && 1u == 1.0");
    t("1 < 1.5 && 2u > 1 && -1 < 0u && 1.5 < 2u");
    f("1 == 'a'");
    t("[1, 2] == [1.0, 2u]");
    t("{'a': 1} == {'a': 1.0}");
    t("{1: 'x'}[1u] == 'x' && {1: 'x'}[1.0] == 'x'");
    f("0.0/0.0 == 0.0/0.0");
}

#[test]
fn logic_absorbs_errors() {
    t("true || 1/0 == 1");
    t("1/0 == 1 || true");
    f("false && 1/0 == 1");
    f("1/0 == 1 && false");
    assert_eq!(eval_err("1/0 == 1 || false"), "division by zero");
    assert_eq!(eval_err("true && 1/0 == 1"), "division by zero");
    t("[1, 0].exists(x, 1/x == 1)");
    f("[0, 1].all(x, 1/x == 5)");
    assert!(eval_err("[0].all(x, 1/x == 1)").contains("division"));
    t("device.attributes['x'].missing == 1 || true");
}

#[test]
fn runtime_errors() {
    assert_eq!(eval_err("9223372036854775807 + 1 == 0"), "integer overflow");
    assert_eq!(
        eval_err("-9223372036854775808 / -1 == 0"),
        "integer overflow"
    );
    assert_eq!(eval_err("0u - 1u == 0u"), "integer overflow");
    assert_eq!(eval_err("1 / 0 == 0"), "division by zero");
    assert_eq!(eval_err("1 % 0 == 0"), "modulus by zero");
    assert!(eval_err("dyn(1) + dyn('a') == 2").starts_with("no such overload"));
    assert!(eval_err("[1][5] == 1").contains("out of range"));
    assert_eq!(eval_err("{'a': 1}['b'] == 1"), "no such key: b");
    assert!(eval_err("{'a': 1, 'a': 2}.size() == 1").contains("repeated key"));
    assert!(eval_err("int(1e30) == 0").contains("overflow"));
    assert!(eval_err("int('x') == 0").contains("cannot convert"));
}

#[test]
fn non_bool_results() {
    assert!(compile_err("1 + 2").contains("must evaluate to bool"));
    assert!(compile_err("device.driver").contains("not string"));
    assert!(compile_err("device.capacity['dra.example.com'].memory").contains("Quantity"));
    assert_eq!(
        run("device.attributes['dra.example.com'].model"),
        Err(EvalError::NotBool("string".into()))
    );
    assert_eq!(run("dyn(1)"), Err(EvalError::NotBool("int".into())));
    t("device.attributes['dra.example.com'].healthy");
}

#[test]
fn compile_errors() {
    assert!(compile_err("foo == 1").contains("undeclared reference to 'foo'"));
    assert!(compile_err("nosuch(1)").contains("'nosuch'"));
    assert!(compile_err("'a'.nosuch()").contains("'nosuch'"));
    assert!(compile_err("'a'.startsWith()").contains("startsWith"));
    assert!(compile_err("device.nosuch == 1").contains("undefined field 'nosuch'"));
    assert!(compile_err("1 +").contains("1:4"));
    assert!(compile_err("'a' + 1 == 'a1'").contains("no matching overload"));
    assert!(compile_err("'a'.matches('(') ").contains("regular expression"));
    assert!(compile_err("[1].map(x, y) == [1]").contains("'y'"));
    assert!(compile_err("x.all(x, true) || true").contains("'x'"));
    let long = format!("true || {}", "true || ".repeat(MAX_EXPRESSION_LEN / 8)) + "true";
    assert!(matches!(
        Program::compile(&long),
        Err(CompileError::TooLong { .. })
    ));
}

#[test]
fn device_lookups() {
    t("device.driver == 'dra.example.com'");
    t("device.allowMultipleAllocations");
    t("device.attributes['dra.example.com'].model == 'a100'");
    t("device.attributes['dra.example.com']['cores'] > 100");
    t("device.attributes['gpu.example.com'].family == 'ampere'");
    t("device.attributes['nosuch.example.com'].size() == 0");
    t("device.attributes.nosuch.size() == 0");
    assert_eq!(
        run("device.attributes['dra.example.com'].nosuch == 1"),
        Err(EvalError::NoSuchKey("nosuch".into()))
    );
    t("has(device.attributes['dra.example.com'].model)");
    f("has(device.attributes['dra.example.com'].nosuch)");
    t("!('nosuch.example.com' in device.attributes)");
    t("'gpu.example.com' in device.attributes");
    t("device.attributes['dra.example.com'].?model.orValue('') == 'a100'");
    t("device.attributes['dra.example.com'].?nosuch.orValue('x') == 'x'");
    t("!device.attributes['dra.example.com'].?nosuch.hasValue()");
    t("device.attributes['x'].?y.?z.orValue(1) == 1");
    t("cel.bind(dra, device.attributes['dra.example.com'], dra.healthy && dra.cores == 108)");
    let none = DeviceValue::new("d", vec![], vec![], None);
    let p = Program::compile("device.allowMultipleAllocations").unwrap();
    assert_eq!(p.eval_device(&none, DEFAULT_COST_LIMIT), Ok(false));
}

#[test]
fn quantities() {
    t("device.capacity['dra.example.com'].memory.compareTo(quantity('10Gi')) >= 0");
    t("device.capacity['dra.example.com'].memory.isGreaterThan(quantity('40G'))");
    t("device.capacity['gpu.example.com'].slices == quantity('7000m')");
    t("quantity('1Gi') == quantity('1073741824')");
    t("quantity('1.5').isLessThan(quantity('2')) && !quantity('2').isLessThan(quantity('2'))");
    t("quantity('1Ki').add(quantity('1Ki')) == quantity('2Ki') && quantity('5').add(3) == quantity('8')");
    t("quantity('5').sub(quantity('6')).sign() == -1 && quantity('5').sub(5).sign() == 0");
    t("quantity('2k').asInteger() == 2000 && quantity('2k').isInteger() && !quantity('1.5').isInteger()");
    t("quantity('500m').asApproximateFloat() == 0.5");
    t("isQuantity('10Gi') && !isQuantity('10GB')");
    assert!(eval_err("quantity('1.5').asInteger() == 1").contains("cannot convert"));
    assert!(eval_err("quantity('bogus').sign() == 0").contains("invalid quantity"));
}

#[test]
fn semvers() {
    t("device.attributes['dra.example.com'].driverVersion.isGreaterThan(semver('1.0.0'))");
    t("device.attributes['dra.example.com'].driverVersion == semver('1.2.3')");
    t("semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3");
    t("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))");
    t("semver('2.0.0').compareTo(semver('10.0.0')) == -1");
    t("isSemver('1.0.0') && !isSemver('v1.0') && !isSemver('01.0.0')");
    assert!(eval_err("semver('x').major() == 1").contains("semver"));
}

#[test]
fn macros() {
    t("[1, 2, 3].all(x, x > 0)");
    t("[1, 2, 3].exists(x, x == 2)");
    t("[1, 2, 3].exists_one(x, x > 2)");
    f("[1, 2, 3].exists_one(x, x > 1)");
    t("[1, 2, 3].map(x, x * 2) == [2, 4, 6]");
    t("[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]");
    t("[1, 2, 3].filter(x, x % 2 == 1) == [1, 3]");
    t("{'a': 1, 'b': 2}.all(k, k in ['a', 'b'])");
    t("{'a': 1, 'b': 2}.map(k, k).size() == 2");
    t("device.attributes['dra.example.com'].exists(k, k == 'model')");
    t("has({'a': 1}.a) && !has({'a': 1}.b)");
    t("cel.bind(x, 2, cel.bind(y, x * 3, y == 6))");
    t("cel.bind(x, 1, [1, 2].map(x, x + 1)) == [2, 3]");
    t("[[1, 2], [3]].map(l, l.map(x, x * 2)) == [[2, 4], [6]]");
    t("[1, 2].all(x, [3, 4].all(y, x < y))");
}

#[test]
fn standard_functions() {
    t("size('héllo') == 5 && 'héllo'.size() == 5 && size([1, 2]) == 2 && {'a': 1}.size() == 1");
    t("size(b'ab') == 2");
    t("int('42') == 42 && int(3.9) == 3 && int(5u) == 5 && uint(5) == 5u && double(2) == 2.0");
    t("string(1) == '1' && string(2u) == '2' && string(1.5) == '1.5' && string(true) == 'true'");
    t("string(1e21) == '1e+21' && string(100000.0) == '100000' && string(1000000.0) == '1e+06'");
    t("bool('true') && !bool('false') && string(b'hi') == 'hi' && bytes('hi') == b'hi'");
    t("'abc'.matches('^a.c$') && matches('abc', 'b') && !'abc'.matches('^b')");
    t("'abc'.matches(dyn('^' + 'a'))");
    t("'hello'.startsWith('he') && 'hello'.endsWith('lo') && 'hello'.contains('ell')");
    t("dyn(1) == 1");
}

#[test]
fn string_extension() {
    t("'hello'.charAt(1) == 'e' && 'hello'.charAt(5) == ''");
    t("'hello'.indexOf('l') == 2 && 'hello'.indexOf('l', 3) == 3 && 'hello'.indexOf('z') == -1");
    t("'hello'.lastIndexOf('l') == 3 && 'hello'.lastIndexOf('l', 2) == 2 && 'hello'.lastIndexOf('') == 5");
    t("'héllo wörld'.indexOf('w') == 6");
    t("'MiXeD'.lowerAscii() == 'mixed' && 'MiXeD'.upperAscii() == 'MIXED'");
    t("'a.b.c'.replace('.', '-') == 'a-b-c' && 'a.b.c'.replace('.', '-', 1) == 'a-b.c'");
    t("'abc'.replace('', '-') == '-a-b-c-'");
    t("'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']");
    t("'abc'.split('') == ['a', 'b', 'c'] && 'a,b'.split(',', 0) == []");
    t("'hello'.substring(1) == 'ello' && 'hello'.substring(1, 3) == 'el'");
    t("'  x \\t'.trim() == 'x'");
    t("['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b'");
    t("strings.quote('a\"b\\n') == '\"a\\\\\"b\\\\n\"'");
    t("'abc'.reverse() == 'cba'");
    assert!(eval_err("'abc'.charAt(4) == ''").contains("index out of range: 4"));
    assert!(eval_err("'abc'.substring(2, 1) == ''").contains("invalid substring range"));
    assert!(eval_err("[1].join() == ''").contains("not string"));
}

#[test]
fn list_extension_and_sets() {
    t("[1, 2, 3].isSorted() && ![3, 1].isSorted()");
    t("[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0 && [].sum() == 0");
    t("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'");
    t("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1");
    t("[1, 2, 3, 4].slice(1, 3) == [2, 3]");
    t("[[1], [2, [3]]].flatten() == [1, 2, [3]] && [[1], [2, [3]]].flatten(2) == [1, 2, 3]");
    t("[1, 2, 1, 1.0, 'a', 'a'].distinct() == [1, 2, 'a']");
    t("[3, 1, 2].sort() == [1, 2, 3] && ['b', 'a'].sort() == ['a', 'b']");
    t("[1, 2].reverse() == [2, 1]");
    t("lists.range(4) == [0, 1, 2, 3]");
    t("sets.contains([1, 2, 3], [2, 3]) && !sets.contains([1], [2])");
    t("sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1, 2], [2, 5]) && !sets.intersects([1], [2])");
    assert!(eval_err("[].min() == 1").contains("empty"));
    assert!(eval_err("[1, 2].slice(2, 1) == []").contains("cannot slice"));
    assert_eq!(
        eval_err("[9223372036854775807, 1].sum() == 0"),
        "integer overflow"
    );
    assert!(eval_err("[1, 'a'].sort() == []").contains("sort"));
}

#[test]
fn optionals() {
    t("optional.of(1).hasValue() && !optional.none().hasValue()");
    t("optional.of(1).value() == 1 && optional.none().orValue(2) == 2");
    t("optional.none().or(optional.of(3)).value() == 3");
    t("optional.of(1).or(optional.of(3)).value() == 1");
    t("!optional.ofNonZeroValue(0).hasValue() && optional.ofNonZeroValue('x').hasValue()");
    t("{'a': {'b': 1}}.?a.b.value() == 1");
    t("!{'a': {'b': 1}}.?x.b.hasValue()");
    t("[1, 2][?5].orValue(0) == 0 && [1, 2][?1].value() == 2");
    t("{'a': 1}[?'a'].value() == 1");
    t("[1, ?optional.none(), ?optional.of(3)] == [1, 3]");
    t("{'a': 1, ?'b': optional.none()} == {'a': 1}");
    t("optional.of(5).orValue(1/0) == 5");
    assert!(eval_err("optional.none().value() == 1").contains("optional.none()"));
}

#[test]
fn literals_and_strings() {
    t(r#""a\tb" == 'a\u0009b' && "\x41\101\U00000041" == 'AAA'"#);
    t(r#"r'\n'.size() == 2 && '''multi
line'''.contains('\n')"#);
    t("null == null && [] == [] && {} == {}");
    t("1e3 == 1000.0 && .5 == 0.5");
    t("// comment\n true");
}

#[test]
fn program_is_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Program>();
    assert_send_sync::<DeviceValue>();
    let p = Program::compile("true").unwrap();
    let q = p.clone();
    assert_eq!(q.source(), "true");
}
