//! Static checking: name resolution, function resolution and a light type
//! inference that catches statically-known type errors (notably a non-bool
//! result). Types the checker cannot know are `Dyn`; for those the
//! evaluator checks at runtime.

use crate::ast::{BinaryOp, Expr, ExprKind, Literal, MacroKind, UnaryOp};
use crate::error::CompileError;
use crate::functions::{self, compile_regex, Func, RegexCache};
pub(crate) use crate::types::Ty;

pub(crate) struct Checker<'a> {
    scopes: Vec<(String, Ty)>,
    pub regexes: &'a mut RegexCache,
}

fn type_err(e: &Expr, message: String) -> CompileError {
    CompileError::Type {
        message,
        line: e.pos.line,
        column: e.pos.col,
    }
}

fn no_matching(e: &Expr, op: &str, tys: &[&Ty]) -> CompileError {
    let names: Vec<String> = tys.iter().map(|t| t.name()).collect();
    type_err(
        e,
        format!(
            "found no matching overload for '{op}' applied to '({})'",
            names.join(", ")
        ),
    )
}

impl<'a> Checker<'a> {
    pub(crate) fn new(regexes: &'a mut RegexCache) -> Checker<'a> {
        Checker {
            scopes: Vec::new(),
            regexes,
        }
    }

    fn lookup_var(&self, name: &str) -> Option<Ty> {
        if let Some((_, t)) = self.scopes.iter().rev().find(|(n, _)| n == name) {
            return Some(t.clone());
        }
        (name == "device").then_some(Ty::Device)
    }

    /// Checks the whole expression, which must be able to produce a bool.
    pub(crate) fn check_root(&mut self, e: &mut Expr) -> Result<(), CompileError> {
        match self.check(e)? {
            Ty::Bool | Ty::Dyn => Ok(()),
            t => Err(CompileError::NotBool { found: t.name() }),
        }
    }

    fn check(&mut self, e: &mut Expr) -> Result<Ty, CompileError> {
        let ty = match &mut e.kind {
            ExprKind::Literal(l) => match l {
                Literal::Null => Ty::Null,
                Literal::Bool(_) => Ty::Bool,
                Literal::Int(_) => Ty::Int,
                Literal::Uint(_) => Ty::Uint,
                Literal::Double(_) => Ty::Double,
                Literal::String(_) => Ty::String,
                Literal::Bytes(_) => Ty::Bytes,
            },
            ExprKind::Ident(name) => match self.lookup_var(name) {
                Some(t) => t,
                None => {
                    return Err(CompileError::UndeclaredReference {
                        name: name.clone(),
                        line: e.pos.line,
                        column: e.pos.col,
                    })
                }
            },
            ExprKind::Select {
                operand,
                field,
                optional,
            } => {
                let t = self.check(operand)?;
                let field_ty = match t {
                    Ty::Device => match field.as_str() {
                        "driver" => Ty::String,
                        "attributes" => Ty::Map(Box::new(Ty::Map(Box::new(Ty::Dyn)))),
                        "capacity" => Ty::Map(Box::new(Ty::Map(Box::new(Ty::Quantity)))),
                        "allowMultipleAllocations" => Ty::Bool,
                        _ => return Err(type_err(operand, format!("undefined field '{field}'"))),
                    },
                    Ty::Map(v) => *v,
                    Ty::Dyn | Ty::Optional => Ty::Dyn,
                    other => {
                        return Err(type_err(
                            operand,
                            format!("type '{}' does not support field selection", other.name()),
                        ))
                    }
                };
                if *optional {
                    Ty::Optional
                } else {
                    field_ty
                }
            }
            ExprKind::Index {
                operand,
                index,
                optional,
            } => {
                let t = self.check(operand)?;
                self.check(index)?;
                let elem = match t {
                    Ty::Map(v) => *v,
                    Ty::List | Ty::Dyn | Ty::Optional => Ty::Dyn,
                    other => {
                        return Err(type_err(
                            operand,
                            format!("type '{}' does not support indexing", other.name()),
                        ))
                    }
                };
                if *optional {
                    Ty::Optional
                } else {
                    elem
                }
            }
            ExprKind::RawCall { .. } => self.resolve_call(e)?,
            ExprKind::Call { .. } => Ty::Dyn,
            ExprKind::Unary(op, a) => {
                let t = self.check(a)?;
                match (op, &t) {
                    (UnaryOp::Not, Ty::Bool | Ty::Dyn) => Ty::Bool,
                    (UnaryOp::Neg, Ty::Int | Ty::Double | Ty::Dyn) => t,
                    (UnaryOp::Not, _) => return Err(no_matching(e, "!_", &[&t])),
                    (UnaryOp::Neg, _) => return Err(no_matching(e, "-_", &[&t])),
                }
            }
            ExprKind::Binary(op, a, b) => {
                let op = *op;
                let ta = self.check(a)?;
                let tb = self.check(b)?;
                binary_type(op, &ta, &tb).ok_or_else(|| no_matching(e, op.symbol(), &[&ta, &tb]))?
            }
            ExprKind::Logical { is_and, operands } => {
                let op = if *is_and { "_&&_" } else { "_||_" };
                for o in operands.iter_mut() {
                    let t = self.check(o)?;
                    if !matches!(t, Ty::Bool | Ty::Dyn) {
                        return Err(no_matching(o, op, &[&t]));
                    }
                }
                Ty::Bool
            }
            ExprKind::Cond(c, t, f) => {
                let tc = self.check(c)?;
                if !matches!(tc, Ty::Bool | Ty::Dyn) {
                    return Err(no_matching(c, "_?_:_", &[&tc]));
                }
                let tt = self.check(t)?;
                let tf = self.check(f)?;
                if tt == tf {
                    tt
                } else {
                    Ty::Dyn
                }
            }
            ExprKind::List(items) => {
                for (i, _) in items.iter_mut() {
                    self.check(i)?;
                }
                Ty::List
            }
            ExprKind::Map(items) => {
                for (k, v, _) in items.iter_mut() {
                    let tk = self.check(k)?;
                    if matches!(tk, Ty::Double | Ty::Null | Ty::List | Ty::Map(_)) {
                        return Err(type_err(
                            k,
                            format!("unsupported map key type: {}", tk.name()),
                        ));
                    }
                    self.check(v)?;
                }
                Ty::Map(Box::new(Ty::Dyn))
            }
            ExprKind::Has { operand, field } => {
                let t = self.check(operand)?;
                if t == Ty::Device
                    && !matches!(
                        field.as_str(),
                        "driver" | "attributes" | "capacity" | "allowMultipleAllocations"
                    )
                {
                    return Err(type_err(operand, format!("undefined field '{field}'")));
                }
                Ty::Bool
            }
            ExprKind::Comprehension {
                kind,
                range,
                var,
                pred,
                transform,
            } => {
                let tr = self.check(range)?;
                if !matches!(tr, Ty::List | Ty::Map(_) | Ty::Dyn) {
                    return Err(type_err(
                        range,
                        format!("expression of type '{}' cannot be the range of a comprehension (must be list, map, or dynamic)", tr.name()),
                    ));
                }
                self.scopes.push((var.clone(), Ty::Dyn));
                let mut r = Ok(());
                if let Some(p) = pred {
                    r = self.check(p).and_then(|t| {
                        if matches!(t, Ty::Bool | Ty::Dyn) {
                            Ok(())
                        } else {
                            Err(type_err(
                                p,
                                format!("predicate must be bool, not {}", t.name()),
                            ))
                        }
                    });
                }
                if let (Ok(()), Some(t)) = (&r, transform) {
                    r = self.check(t).map(|_| ());
                }
                self.scopes.pop();
                r?;
                match kind {
                    MacroKind::All | MacroKind::Exists | MacroKind::ExistsOne => Ty::Bool,
                    MacroKind::Map | MacroKind::Filter => Ty::List,
                }
            }
            ExprKind::Bind { var, init, body } => {
                let ti = self.check(init)?;
                self.scopes.push((var.clone(), ti));
                let r = self.check(body);
                self.scopes.pop();
                r?
            }
        };
        Ok(ty)
    }

    /// Replaces a `RawCall` by a resolved `Call`.
    fn resolve_call(&mut self, e: &mut Expr) -> Result<Ty, CompileError> {
        let kind = std::mem::replace(&mut e.kind, ExprKind::Literal(Literal::Null));
        let ExprKind::RawCall { target, name, args } = kind else {
            e.kind = kind;
            return Ok(Ty::Dyn);
        };
        let argc = args.len();
        // `ns.fn(args)` with an undeclared `ns` may be a namespaced function.
        let namespaced = match target.as_deref() {
            Some(Expr {
                kind: ExprKind::Ident(ns),
                ..
            }) if self.lookup_var(ns).is_none() => {
                let full = format!("{ns}.{name}");
                match functions::lookup(&full, false, argc) {
                    Some(sig) => Some(sig),
                    None if functions::is_known_name(&full) => {
                        return Err(CompileError::UnknownFunction {
                            name: full,
                            arity: argc,
                            receiver: false,
                            line: e.pos.line,
                            column: e.pos.col,
                        })
                    }
                    None => None,
                }
            }
            _ => None,
        };
        let (sig, mut all_args) = match (namespaced, target) {
            (Some(sig), _) => (sig, args),
            (None, Some(t)) => {
                let sig =
                    functions::lookup(&name, true, argc).ok_or(CompileError::UnknownFunction {
                        name: name.clone(),
                        arity: argc,
                        receiver: true,
                        line: e.pos.line,
                        column: e.pos.col,
                    })?;
                let mut v = Vec::with_capacity(argc + 1);
                v.push(*t);
                v.extend(args);
                (sig, v)
            }
            (None, None) => {
                let sig =
                    functions::lookup(&name, false, argc).ok_or(CompileError::UnknownFunction {
                        name: name.clone(),
                        arity: argc,
                        receiver: false,
                        line: e.pos.line,
                        column: e.pos.col,
                    })?;
                (sig, args)
            }
        };
        let mut tys = Vec::with_capacity(all_args.len());
        for a in all_args.iter_mut() {
            tys.push(self.check(a)?);
        }
        if sig.func == Func::Matches {
            if let Some(Expr {
                kind: ExprKind::Literal(Literal::String(p)),
                ..
            }) = all_args.last()
            {
                if !self.regexes.contains_key(&**p) {
                    let re = compile_regex(p)
                        .map_err(|m| type_err(e, format!("invalid regular expression: {m}")))?;
                    self.regexes.insert(p.to_string(), re);
                }
            }
        }
        let ret = match (sig.func, tys.first()) {
            (Func::Dyn, _) => Ty::Dyn,
            (Func::Reverse, Some(Ty::String)) => Ty::String,
            (Func::Reverse, Some(Ty::List)) => Ty::List,
            _ => sig.ret.clone(),
        };
        e.kind = ExprKind::Call {
            func: sig.func,
            args: all_args,
        };
        Ok(ret)
    }
}

/// Result type of a binary operator, or `None` for a statically impossible
/// combination of known types.
fn binary_type(op: BinaryOp, a: &Ty, b: &Ty) -> Option<Ty> {
    use Ty::*;
    let dyn_either = *a == Dyn || *b == Dyn;
    let numeric = |t: &Ty| matches!(t, Int | Uint | Double);
    match op {
        BinaryOp::Eq | BinaryOp::Ne => Some(Bool),
        BinaryOp::In => match b {
            List | Map(_) | Dyn => Some(Bool),
            _ => None,
        },
        BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge => {
            let ok = dyn_either
                || (numeric(a) && numeric(b))
                || (a == b && matches!(a, String | Bytes | Bool));
            ok.then_some(Bool)
        }
        BinaryOp::Add => {
            if dyn_either {
                Some(Dyn)
            } else if a == b && matches!(a, Int | Uint | Double | String | Bytes | List) {
                Some(a.clone())
            } else {
                None
            }
        }
        BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
            if dyn_either {
                Some(Dyn)
            } else if a == b && numeric(a) {
                Some(a.clone())
            } else {
                None
            }
        }
        BinaryOp::Rem => {
            if dyn_either {
                Some(Dyn)
            } else if a == b && matches!(a, Int | Uint) {
                Some(a.clone())
            } else {
                None
            }
        }
    }
}
