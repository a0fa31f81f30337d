//! The subset of Go's text/template that scheduler_perf's templates use for values:
//! `{{.Index}}`, `{{.Count}}`, `{{.<templateParam>}}`, integer literals, and the
//! integer functions scheduler_perf registers (`AddInt`, `SubtractInt`,
//! `MultiplyInt`, `DivideInt`, `Mod`),
//! called with arguments that are values or parenthesised calls:
//! `{{AddInt 8000 (Mod .Index (DivideInt .podsCount .nodesCount))}}`. Control
//! actions (`if`, `range`), variables and pipes are refused with the action named.

use std::collections::BTreeMap;

use serde_json::Value;

/// What an action evaluates to.
#[derive(Debug, Clone, PartialEq)]
enum Val {
    Int(i64),
    Text(String),
}

impl Val {
    fn into_text(self) -> String {
        match self {
            Val::Int(i) => i.to_string(),
            Val::Text(s) => s,
        }
    }
}

/// The names an action may read.
pub(super) struct Scope<'a> {
    pub index: usize,
    pub count: usize,
    pub params: &'a BTreeMap<String, Value>,
}

/// Evaluates the inside of one `{{ }}` action to the text it renders as.
pub(super) fn eval_action(action: &str, scope: &Scope) -> Result<String, String> {
    let tokens = tokenize(action);
    let mut pos = 0;
    let v = expr(&tokens, &mut pos, scope, action)?;
    if pos != tokens.len() {
        return Err(unsupported(action));
    }
    Ok(v.into_text())
}

fn unsupported(action: &str) -> String {
    format!(
        "template action {{{{{action}}}}} is not supported: only {{{{.Index}}}}, {{{{.Count}}}}, {{{{.<param>}}}}, integers and the functions AddInt, SubtractInt, MultiplyInt, DivideInt and Mod"
    )
}

fn tokenize(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        if c == '(' || c == ')' || c.is_whitespace() {
            if let Some(b) = start.take() {
                out.push(&s[b..i]);
            }
            if !c.is_whitespace() {
                out.push(&s[i..i + 1]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(b) = start {
        out.push(&s[b..]);
    }
    out
}

/// A term, or a function applied to the terms after it.
fn expr(t: &[&str], pos: &mut usize, scope: &Scope, action: &str) -> Result<Val, String> {
    let Some(&first) = t.get(*pos) else {
        return Err(unsupported(action));
    };
    if let Some(f) = function(first) {
        *pos += 1;
        let mut args = Vec::new();
        while let Some(&tok) = t.get(*pos) {
            if tok == ")" {
                break;
            }
            args.push(term(t, pos, scope, action)?);
        }
        return f(first, &args);
    }
    term(t, pos, scope, action)
}

fn term(t: &[&str], pos: &mut usize, scope: &Scope, action: &str) -> Result<Val, String> {
    let Some(&tok) = t.get(*pos) else {
        return Err(unsupported(action));
    };
    *pos += 1;
    if tok == "(" {
        let v = expr(t, pos, scope, action)?;
        if t.get(*pos) != Some(&")") {
            return Err(format!(
                "template action {{{{{action}}}}}: unbalanced parentheses"
            ));
        }
        *pos += 1;
        return Ok(v);
    }
    if let Some(name) = tok.strip_prefix('.') {
        return Ok(match name {
            "Index" => Val::Int(scope.index as i64),
            "Count" => Val::Int(scope.count as i64),
            p => match scope.params.get(p) {
                Some(Value::String(s)) => Val::Text(s.clone()),
                Some(Value::Number(n)) => match n.as_i64() {
                    Some(i) => Val::Int(i),
                    None => Val::Text(n.to_string()),
                },
                Some(v) => Val::Text(v.to_string()),
                None => return Err(format!("template parameter {p} is not set")),
            },
        });
    }
    tok.parse::<i64>()
        .map(Val::Int)
        .map_err(|_| unsupported(action))
}

type Func = fn(&str, &[Val]) -> Result<Val, String>;

/// scheduler_perf's integer functions. `mod` and `div` (lower case) are accepted
/// too: upstream's event_handling templates spell them so.
fn function(name: &str) -> Option<Func> {
    Some(match name {
        "AddInt" => |n, a| ints(n, a).map(|(x, y)| Val::Int(x.wrapping_add(y))),
        "SubtractInt" => |n, a| ints(n, a).map(|(x, y)| Val::Int(x.wrapping_sub(y))),
        "MultiplyInt" => |n, a| ints(n, a).map(|(x, y)| Val::Int(x.wrapping_mul(y))),
        "DivideInt" | "div" => |n, a| {
            let (x, y) = ints(n, a)?;
            x.checked_div(y)
                .map(Val::Int)
                .ok_or_else(|| format!("{n} {x} {y}: division by zero"))
        },
        "Mod" | "mod" => |n, a| {
            let (x, y) = ints(n, a)?;
            x.checked_rem(y)
                .map(Val::Int)
                .ok_or_else(|| format!("{n} {x} {y}: division by zero"))
        },
        _ => return None,
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

    fn render(action: &str, index: usize, params: &[(&str, Value)]) -> Result<String, String> {
        let params: BTreeMap<String, Value> = params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        eval_action(
            action,
            &Scope {
                index,
                count: 30,
                params: &params,
            },
        )
    }

    #[test]
    fn upstream_actions_evaluate_as_go_does() {
        let p = |n: i64| Value::from(n);
        assert_eq!(render(".Index", 7, &[]).unwrap(), "7");
        assert_eq!(render(" .Count ", 7, &[]).unwrap(), "30");
        assert_eq!(
            render(
                "DivideInt .Index .podsPerGroup",
                17,
                &[("podsPerGroup", p(8))]
            )
            .unwrap(),
            "2"
        );
        assert_eq!(render("Mod .Index 12", 29, &[]).unwrap(), "5");
        assert_eq!(render(" mod .Index 12 ", 29, &[]).unwrap(), "5");
        assert_eq!(
            render(
                "AddInt 8000 (Mod .Index (DivideInt .podsCount .nodesCount))",
                7,
                &[("podsCount", p(100)), ("nodesCount", p(20))]
            )
            .unwrap(),
            "8002"
        );
        assert_eq!(
            render("AddInt 0 .priority", 0, &[("priority", p(-5))]).unwrap(),
            "-5"
        );
        assert_eq!(render("DivideInt 30000 .Count", 0, &[]).unwrap(), "1000");
        assert_eq!(render("div .Index 10", 37, &[]).unwrap(), "3");
        assert_eq!(render("SubtractInt 5 .Index", 7, &[]).unwrap(), "-2");
        assert_eq!(render("MultiplyInt 3 .Index", 7, &[]).unwrap(), "21");
        // Go's integer division and remainder truncate toward zero.
        assert_eq!(render("DivideInt -7 2", 0, &[]).unwrap(), "-3");
        assert_eq!(render("Mod -7 2", 0, &[]).unwrap(), "-1");
        assert_eq!(
            render(".zone", 0, &[("zone", Value::from("z1"))]).unwrap(),
            "z1"
        );
    }

    #[test]
    fn what_is_not_supported_is_refused_naming_it() {
        let e = render("if .priority", 0, &[]).unwrap_err();
        assert!(e.contains("{{if .priority}} is not supported"), "{e}");
        assert!(render("$numDevices | Int", 0, &[]).is_err());
        assert!(render("DivideInt .Index 0", 3, &[])
            .unwrap_err()
            .contains("division by zero"));
        assert!(render("Mod .Index", 3, &[])
            .unwrap_err()
            .contains("two integers"));
        assert!(render("AddInt .zone 1", 0, &[("zone", Value::from("z"))])
            .unwrap_err()
            .contains("two integers"));
        assert!(render("AddInt (Mod 1 2", 0, &[])
            .unwrap_err()
            .contains("unbalanced"));
        assert!(render(".missing", 0, &[])
            .unwrap_err()
            .contains("missing is not set"));
    }
}
