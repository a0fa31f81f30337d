//! The subset of Go's text/template that scheduler_perf's templates use:
//! values (`{{.Index}}`, `{{.Count}}`, `{{.<templateParam>}}`, `{{.}}`, `$variables`,
//! integer and string literals, `nil`), pipelines (`x | Int`), variable declarations
//! (`{{$n := or .numDevices 64}}`), `{{range N}}` / `{{range $i := N}}` over an integer
//! or a list, `{{if}}`/`{{else}}`/`{{end}}`, `{{-`/`-}}` trimming, and the functions
//! scheduler_perf registers or Go predefines that its templates call: `AddInt`,
//! `SubtractInt`, `MultiplyInt`, `DivideInt`, `Mod` (also `div`, `mod`), `Int`,
//! `JSON`, `or`, `and`, `not`, `eq`, `ne`, `lt`, `le`, `gt`, `ge`. Anything else
//! (`with`, `define`, `template`, other functions) is refused naming the action.
//!
//! As Go's default `missingkey`, a parameter the workload does not set is `nil`
//! (what `or .numRequests 1` relies on); printing one is an error that names it.

use std::collections::BTreeMap;

use serde_json::Value;

/// A value in a template.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Int(i64),
    Text(String),
    Bool(bool),
    /// A parameter's JSON value that is neither a string nor an integer.
    Json(Value),
    Nil,
}

impl Val {
    fn truthy(&self) -> bool {
        match self {
            Val::Int(i) => *i != 0,
            Val::Text(s) => !s.is_empty(),
            Val::Bool(b) => *b,
            Val::Json(v) => match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
            },
            Val::Nil => false,
        }
    }

    fn render(&self, what: &str) -> Result<String, String> {
        Ok(match self {
            Val::Int(i) => i.to_string(),
            Val::Text(s) => s.clone(),
            Val::Bool(b) => b.to_string(),
            Val::Json(v) => v.to_string(),
            Val::Nil => return Err(format!("{what}: template parameter not set (nil)")),
        })
    }

    fn from_json(v: &Value) -> Val {
        match v {
            Value::String(s) => Val::Text(s.clone()),
            Value::Number(n) => match n.as_i64() {
                Some(i) => Val::Int(i),
                None => Val::Json(v.clone()),
            },
            Value::Bool(b) => Val::Bool(*b),
            Value::Null => Val::Nil,
            other => Val::Json(other.clone()),
        }
    }
}

/// The names an action may read.
pub(super) struct Scope<'a> {
    pub index: usize,
    pub count: usize,
    pub params: &'a BTreeMap<String, Value>,
}

/// Iterations a template may run in all (`range` over a huge integer is refused).
const MAX_ITERATIONS: usize = 100_000;
/// Bytes a template may render to.
const MAX_OUTPUT: usize = 16 << 20;

enum Node {
    Text(String),
    /// An action that prints (or declares a variable: prints nothing).
    Action(String),
    Range {
        var: Option<String>,
        expr: String,
        body: Vec<Node>,
    },
    If {
        expr: String,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

fn unsupported(action: &str) -> String {
    format!(
        "template action {{{{{action}}}}} is not supported: only values, variables, pipelines, range, if/else and the functions AddInt, SubtractInt, MultiplyInt, DivideInt, Mod, Int, JSON, or, and, not, eq, ne, lt, le, gt, ge"
    )
}

/// Splits the text into text and action pieces, applying `{{-` and `-}}` trimming.
fn lex(text: &str) -> Result<Vec<(bool, String)>, String> {
    let mut out: Vec<(bool, String)> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let mut before = rest[..start].to_string();
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| "unterminated {{ in template".to_string())?;
        let mut action = &after[..end];
        if let Some(a) = action.strip_prefix('-') {
            before = before.trim_end().to_string();
            action = a;
        }
        let mut trim_after = false;
        if let Some(a) = action.strip_suffix('-') {
            trim_after = true;
            action = a;
        }
        out.push((false, before));
        out.push((true, action.trim().to_string()));
        rest = &after[end + 2..];
        if trim_after {
            rest = rest.trim_start();
        }
    }
    out.push((false, rest.to_string()));
    Ok(out)
}

/// Parses pieces into nodes up to an `end` or `else` (returned as the terminator).
fn parse(
    pieces: &[(bool, String)],
    pos: &mut usize,
) -> Result<(Vec<Node>, Option<String>), String> {
    let mut nodes = Vec::new();
    while *pos < pieces.len() {
        let (is_action, s) = &pieces[*pos];
        *pos += 1;
        if !is_action {
            if !s.is_empty() {
                nodes.push(Node::Text(s.clone()));
            }
            continue;
        }
        let word = s.split_whitespace().next().unwrap_or("");
        match word {
            "end" | "else" => return Ok((nodes, Some(word.to_string()))),
            "range" => {
                let rest = s["range".len()..].trim();
                let (var, expr) = match rest.split_once(":=") {
                    Some((v, e)) if v.trim().starts_with('$') && !v.contains(',') => {
                        (Some(v.trim().to_string()), e.trim().to_string())
                    }
                    Some(_) => return Err(unsupported(s)),
                    None => (None, rest.to_string()),
                };
                let (body, term) = parse(pieces, pos)?;
                if term.as_deref() != Some("end") {
                    return Err(format!(
                        "template action {{{{{s}}}}}: range without a matching end"
                    ));
                }
                nodes.push(Node::Range { var, expr, body });
            }
            "if" => {
                let expr = s["if".len()..].trim().to_string();
                let (then, term) = parse(pieces, pos)?;
                let otherwise = match term.as_deref() {
                    Some("else") => {
                        let (o, t) = parse(pieces, pos)?;
                        if t.as_deref() != Some("end") {
                            return Err(format!(
                                "template action {{{{{s}}}}}: if without a matching end"
                            ));
                        }
                        o
                    }
                    Some("end") => Vec::new(),
                    _ => {
                        return Err(format!(
                            "template action {{{{{s}}}}}: if without a matching end"
                        ))
                    }
                };
                nodes.push(Node::If {
                    expr,
                    then,
                    otherwise,
                });
            }
            "with" | "define" | "template" | "block" | "break" | "continue" => {
                return Err(unsupported(s))
            }
            _ => nodes.push(Node::Action(s.clone())),
        }
    }
    Ok((nodes, None))
}

struct Env<'a> {
    scope: &'a Scope<'a>,
    vars: Vec<(String, Val)>,
    dot: Val,
    iterations: usize,
}

/// Renders a whole template.
pub(super) fn render(text: &str, scope: &Scope) -> Result<String, String> {
    let pieces = lex(text)?;
    let mut pos = 0;
    let (nodes, term) = parse(&pieces, &mut pos)?;
    if let Some(t) = term {
        return Err(format!(
            "template action {{{{{t}}}}} without a matching range or if"
        ));
    }
    let mut env = Env {
        scope,
        vars: Vec::new(),
        dot: Val::Nil,
        iterations: 0,
    };
    let mut out = String::with_capacity(text.len());
    exec(&nodes, &mut env, &mut out)?;
    Ok(out)
}

fn exec(nodes: &[Node], env: &mut Env, out: &mut String) -> Result<(), String> {
    for n in nodes {
        if out.len() > MAX_OUTPUT {
            return Err(format!("template renders to more than {MAX_OUTPUT} bytes"));
        }
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Action(a) => {
                if let Some((var, expr)) = a.split_once(":=") {
                    let var = var.trim();
                    if !var.starts_with('$') {
                        return Err(unsupported(a));
                    }
                    let v = eval(expr.trim(), env, a)?;
                    env.vars.push((var.to_string(), v));
                } else {
                    out.push_str(&eval(a, env, a)?.render(&format!("{{{{{a}}}}}"))?);
                }
            }
            Node::Range { var, expr, body } => {
                let items: Vec<Val> = match eval(expr, env, expr)? {
                    Val::Int(n) if n >= 0 => {
                        if n as usize > MAX_ITERATIONS {
                            return Err(format!("{{{{range {expr}}}}}: {n} iterations is over the limit of {MAX_ITERATIONS}"));
                        }
                        (0..n).map(Val::Int).collect()
                    }
                    Val::Int(_) | Val::Nil => Vec::new(),
                    Val::Json(Value::Array(a)) => a.iter().map(Val::from_json).collect(),
                    other => {
                        return Err(format!("{{{{range {expr}}}}}: cannot range over {other:?}"))
                    }
                };
                let saved_dot = std::mem::replace(&mut env.dot, Val::Nil);
                let depth = env.vars.len();
                for item in items {
                    env.iterations += 1;
                    if env.iterations > MAX_ITERATIONS {
                        return Err(format!(
                            "template runs more than {MAX_ITERATIONS} iterations"
                        ));
                    }
                    env.vars.truncate(depth);
                    if let Some(v) = var {
                        env.vars.push((v.clone(), item.clone()));
                    }
                    env.dot = item;
                    exec(body, env, out)?;
                }
                env.vars.truncate(depth);
                env.dot = saved_dot;
            }
            Node::If {
                expr,
                then,
                otherwise,
            } => {
                let depth = env.vars.len();
                if eval(expr, env, expr)?.truthy() {
                    exec(then, env, out)?;
                } else {
                    exec(otherwise, env, out)?;
                }
                env.vars.truncate(depth);
            }
        }
    }
    Ok(())
}

fn tokenize(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let mut lit = String::from('"');
                loop {
                    match chars.next() {
                        Some('\\') => {
                            if let Some(n) = chars.next() {
                                lit.push(match n {
                                    'n' => '\n',
                                    't' => '\t',
                                    x => x,
                                });
                            }
                        }
                        Some('"') => break,
                        Some(x) => lit.push(x),
                        None => return Err(format!("unterminated string in {{{{{s}}}}}")),
                    }
                }
                out.push(lit);
            }
            '(' | ')' | '|' => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                out.push(c.to_string());
            }
            c if c.is_whitespace() => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

/// Evaluates a pipeline.
fn eval(expr: &str, env: &Env, action: &str) -> Result<Val, String> {
    let t = tokenize(expr)?;
    let mut pos = 0;
    let v = pipeline(&t, &mut pos, env, action)?;
    if pos != t.len() {
        return Err(unsupported(action));
    }
    Ok(v)
}

fn pipeline(t: &[String], pos: &mut usize, env: &Env, action: &str) -> Result<Val, String> {
    let mut v = command(t, pos, env, action, None)?;
    while t.get(*pos).map(String::as_str) == Some("|") {
        *pos += 1;
        v = command(t, pos, env, action, Some(v))?;
    }
    Ok(v)
}

/// A function call (with the piped value as its last argument) or a term.
fn command(
    t: &[String],
    pos: &mut usize,
    env: &Env,
    action: &str,
    piped: Option<Val>,
) -> Result<Val, String> {
    let Some(first) = t.get(*pos) else {
        return Err(unsupported(action));
    };
    if is_function(first) {
        let name = first.clone();
        *pos += 1;
        let mut args = Vec::new();
        while let Some(tok) = t.get(*pos) {
            if tok == ")" || tok == "|" {
                break;
            }
            args.push(term(t, pos, env, action)?);
        }
        if let Some(p) = piped {
            args.push(p);
        }
        return call(&name, &args);
    }
    if piped.is_some() {
        return Err(unsupported(action));
    }
    term(t, pos, env, action)
}

fn term(t: &[String], pos: &mut usize, env: &Env, action: &str) -> Result<Val, String> {
    let Some(tok) = t.get(*pos) else {
        return Err(unsupported(action));
    };
    *pos += 1;
    if tok == "(" {
        let v = pipeline(t, pos, env, action)?;
        if t.get(*pos).map(String::as_str) != Some(")") {
            return Err(format!(
                "template action {{{{{action}}}}}: unbalanced parentheses"
            ));
        }
        *pos += 1;
        return Ok(v);
    }
    if tok == "." {
        return Ok(env.dot.clone());
    }
    if tok == "nil" {
        return Ok(Val::Nil);
    }
    if tok == "true" || tok == "false" {
        return Ok(Val::Bool(tok == "true"));
    }
    if let Some(s) = tok.strip_prefix('"') {
        return Ok(Val::Text(s.to_string()));
    }
    if tok.starts_with('$') {
        return env
            .vars
            .iter()
            .rev()
            .find(|(n, _)| n == tok)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("template action {{{{{action}}}}}: undefined variable {tok}"));
    }
    if let Some(name) = tok.strip_prefix('.') {
        return Ok(match name {
            "Index" => Val::Int(env.scope.index as i64),
            "Count" => Val::Int(env.scope.count as i64),
            p => env
                .scope
                .params
                .get(p)
                .map(Val::from_json)
                .unwrap_or(Val::Nil),
        });
    }
    tok.parse::<i64>()
        .map(Val::Int)
        .map_err(|_| unsupported(action))
}

fn is_function(name: &str) -> bool {
    matches!(
        name,
        "AddInt"
            | "SubtractInt"
            | "MultiplyInt"
            | "DivideInt"
            | "div"
            | "Mod"
            | "mod"
            | "Int"
            | "JSON"
            | "or"
            | "and"
            | "not"
            | "eq"
            | "ne"
            | "lt"
            | "le"
            | "gt"
            | "ge"
    )
}

fn call(name: &str, a: &[Val]) -> Result<Val, String> {
    Ok(match name {
        "AddInt" => ints(name, a).map(|(x, y)| Val::Int(x.wrapping_add(y)))?,
        "SubtractInt" => ints(name, a).map(|(x, y)| Val::Int(x.wrapping_sub(y)))?,
        "MultiplyInt" => ints(name, a).map(|(x, y)| Val::Int(x.wrapping_mul(y)))?,
        "DivideInt" | "div" => {
            let (x, y) = ints(name, a)?;
            Val::Int(
                x.checked_div(y)
                    .ok_or_else(|| format!("{name} {x} {y}: division by zero"))?,
            )
        }
        "Mod" | "mod" => {
            let (x, y) = ints(name, a)?;
            Val::Int(
                x.checked_rem(y)
                    .ok_or_else(|| format!("{name} {x} {y}: division by zero"))?,
            )
        }
        // scheduler_perf's `Int`: a number (or a numeric string) as an integer.
        "Int" => match a {
            [Val::Int(i)] => Val::Int(*i),
            [Val::Text(s)] => Val::Int(
                s.trim()
                    .parse()
                    .map_err(|_| format!("Int {s:?}: not an integer"))?,
            ),
            [Val::Json(Value::Number(n))] => Val::Int(n.as_f64().unwrap_or(0.0) as i64),
            [other] => return Err(format!("Int {other:?}: not an integer")),
            _ => return Err(format!("Int takes one argument, got {}", a.len())),
        },
        // scheduler_perf's `JSON`: the value marshalled (nil is `null`).
        "JSON" => match a {
            [v] => Val::Text(
                match v {
                    Val::Int(i) => Value::from(*i),
                    Val::Text(s) => Value::from(s.clone()),
                    Val::Bool(b) => Value::from(*b),
                    Val::Json(j) => j.clone(),
                    Val::Nil => Value::Null,
                }
                .to_string(),
            ),
            _ => return Err(format!("JSON takes one argument, got {}", a.len())),
        },
        // Go's `or`/`and`: the first truthy (falsy) argument, else the last.
        "or" => a
            .iter()
            .find(|v| v.truthy())
            .or(a.last())
            .cloned()
            .unwrap_or(Val::Nil),
        "and" => a
            .iter()
            .find(|v| !v.truthy())
            .or(a.last())
            .cloned()
            .unwrap_or(Val::Nil),
        "not" => match a {
            [v] => Val::Bool(!v.truthy()),
            _ => return Err(format!("not takes one argument, got {}", a.len())),
        },
        "eq" | "ne" => match a {
            [x, rest @ ..] if !rest.is_empty() => {
                let eq = rest.iter().any(|y| y == x);
                Val::Bool(if name == "eq" { eq } else { !eq })
            }
            _ => return Err(format!("{name} takes two arguments")),
        },
        "lt" | "le" | "gt" | "ge" => {
            let (x, y) = ints(name, a)?;
            Val::Bool(match name {
                "lt" => x < y,
                "le" => x <= y,
                "gt" => x > y,
                _ => x >= y,
            })
        }
        other => return Err(format!("unknown template function {other}")),
    })
}

/// The two integer arguments of `name`.
fn ints(name: &str, args: &[Val]) -> Result<(i64, i64), String> {
    match args {
        [Val::Int(x), Val::Int(y)] => Ok((*x, *y)),
        [_, _] => Err(format!("{name} takes two integers, got {args:?}")),
        _ => Err(format!(
            "{name} takes two integers, got {} arguments",
            args.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render_with(text: &str, index: usize, params: &[(&str, Value)]) -> Result<String, String> {
        let params: BTreeMap<String, Value> = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        render(
            text,
            &Scope {
                index,
                count: 30,
                params: &params,
            },
        )
    }

    fn action(a: &str, index: usize, params: &[(&str, Value)]) -> Result<String, String> {
        render_with(&format!("{{{{{a}}}}}"), index, params)
    }

    #[test]
    fn upstream_actions_evaluate_as_go_does() {
        let p = |n: i64| Value::from(n);
        assert_eq!(action(".Index", 7, &[]).unwrap(), "7");
        assert_eq!(action(" .Count ", 7, &[]).unwrap(), "30");
        assert_eq!(
            action(
                "DivideInt .Index .podsPerGroup",
                17,
                &[("podsPerGroup", p(8))]
            )
            .unwrap(),
            "2"
        );
        assert_eq!(action("Mod .Index 12", 29, &[]).unwrap(), "5");
        assert_eq!(action(" mod .Index 12 ", 29, &[]).unwrap(), "5");
        assert_eq!(
            action(
                "AddInt 8000 (Mod .Index (DivideInt .podsCount .nodesCount))",
                7,
                &[("podsCount", p(100)), ("nodesCount", p(20))]
            )
            .unwrap(),
            "8002"
        );
        assert_eq!(
            action("AddInt 0 .priority", 0, &[("priority", p(-5))]).unwrap(),
            "-5"
        );
        assert_eq!(action("DivideInt 30000 .Count", 0, &[]).unwrap(), "1000");
        assert_eq!(action("div .Index 10", 37, &[]).unwrap(), "3");
        assert_eq!(action("SubtractInt 5 .Index", 7, &[]).unwrap(), "-2");
        assert_eq!(action("MultiplyInt 3 .Index", 7, &[]).unwrap(), "21");
        // Go's integer division and remainder truncate toward zero.
        assert_eq!(action("DivideInt -7 2", 0, &[]).unwrap(), "-3");
        assert_eq!(action("Mod -7 2", 0, &[]).unwrap(), "-1");
        assert_eq!(
            action(".zone", 0, &[("zone", Value::from("z1"))]).unwrap(),
            "z1"
        );
    }

    /// dra/templates/resourceclaimtemplate.yaml and resourceslice-list-attributes.
    #[test]
    fn variables_pipelines_range_and_if_render_as_go_does() {
        let t = "{{$numRequests := (or .numRequests 1) | Int}}\n{{$selectors := (or .selectors nil) | JSON}}\nrequests:{{range $numRequests}}\n- name: req-{{.}}\n  selectors: {{$selectors}}{{end}}\n";
        assert_eq!(
            render_with(t, 0, &[]).unwrap(),
            "\n\nrequests:\n- name: req-0\n  selectors: null\n"
        );
        let sel = serde_json::json!([{"cel": {"expression": "true"}}]);
        assert_eq!(
            render_with(t, 0, &[("numRequests", Value::from(2)), ("selectors", sel)]).unwrap(),
            "\n\nrequests:\n- name: req-0\n  selectors: [{\"cel\":{\"expression\":\"true\"}}]\n- name: req-1\n  selectors: [{\"cel\":{\"expression\":\"true\"}}]\n"
        );
        let t = "{{$n := or .numDevices 4}}{{range $i := ($n | Int)}}{{if ge $i 2}}m{{else}}x{{end}}{{$i}} {{end}}";
        assert_eq!(render_with(t, 0, &[]).unwrap(), "x0 x1 m2 m3 ");
        assert_eq!(render_with("a  {{- .Index -}}  b", 3, &[]).unwrap(), "a3b");
        assert_eq!(
            render_with("{{$v := or .v \"shared\"}}{{$v}}", 0, &[]).unwrap(),
            "shared"
        );
    }

    #[test]
    fn what_is_not_supported_is_refused_naming_it() {
        let e = action("with .priority", 0, &[]).unwrap_err();
        assert!(e.contains("{{with .priority}} is not supported"), "{e}");
        assert!(action("$numDevices | Int", 0, &[])
            .unwrap_err()
            .contains("undefined variable"));
        assert!(action("DivideInt .Index 0", 3, &[])
            .unwrap_err()
            .contains("division by zero"));
        assert!(action("Mod .Index", 3, &[])
            .unwrap_err()
            .contains("two integers"));
        assert!(action("AddInt .zone 1", 0, &[("zone", Value::from("z"))])
            .unwrap_err()
            .contains("two integers"));
        assert!(action("AddInt (Mod 1 2", 0, &[])
            .unwrap_err()
            .contains("unbalanced"));
        assert!(action(".missing", 0, &[]).unwrap_err().contains("not set"));
        assert!(render_with("{{range 5}}x", 0, &[])
            .unwrap_err()
            .contains("without a matching end"));
        assert!(render_with("{{range 1000000000}}x{{end}}", 0, &[])
            .unwrap_err()
            .contains("limit"));
        assert!(render_with("{{end}}", 0, &[])
            .unwrap_err()
            .contains("without a matching"));
    }
}
