//! The expression language of `kernel.toml`: `require` rules, `[derived]` params and
//! `[launch]` geometry. Integer expressions over names (params, derived params, problem
//! keys): literals, `+ - * / %`, comparisons, `&& || !`, parentheses, `min`, `max`,
//! `cdiv`. Exact 64-bit integer semantics: `/` and `%` truncate toward zero as in C,
//! `cdiv(a, b)` rounds the quotient up, comparisons and logic give 1 or 0, and
//! overflow or division by zero is an error, never a wrapped value or a panic.
//!
//! Parsed once; every node keeps its byte span in the source text, so errors point at
//! a column. The exported Python module carries an evaluator with the same rules; the
//! table `crates/kart-runtime/tests/data/expr.json` is checked by both.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expr {
    /// The text it was parsed from.
    pub text: String,
    root: Node,
}

/// How deep an expression may nest: parentheses, function calls, unary operators and
/// chains of binary operators (`a + b + c` is two levels) together. Parsing, evaluating
/// and dropping a tree recurse once per level, so a file holding `((((…1))))` 100,000
/// levels deep must be refused before it exhausts the stack; real rules nest a few
/// levels. The exported Python module's evaluator (whose recursion Python caps at 1,000
/// frames) only ever sees expressions that passed this check.
pub const MAX_DEPTH: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    span: Range<usize>,
    kind: NodeKind,
    /// Levels of the tree under and including this node.
    depth: usize,
}

impl Node {
    /// A node over `kind`'s children; an error where the tree grows past [`MAX_DEPTH`].
    fn new(span: Range<usize>, kind: NodeKind) -> Result<Node, ExprError> {
        let below = match &kind {
            NodeKind::Int(_) | NodeKind::Name(_) => 0,
            NodeKind::Not(a) | NodeKind::Neg(a) => a.depth,
            NodeKind::Binary(_, a, b) => a.depth.max(b.depth),
            NodeKind::Call(_, args) => args.iter().map(|a| a.depth).max().unwrap_or(0),
        };
        if below >= MAX_DEPTH {
            return Err(too_deep(span));
        }
        Ok(Node {
            span,
            kind,
            depth: below + 1,
        })
    }
}

fn too_deep(span: Range<usize>) -> ExprError {
    syntax(
        span,
        format!(
            "the expression nests more than {MAX_DEPTH} levels deep (parentheses, calls and chained operators together)"
        ),
    )
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum NodeKind {
    Int(i64),
    Name(String),
    Not(Box<Node>),
    Neg(Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    Call(Func, Vec<Node>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Func {
    Min,
    Max,
    Cdiv,
}

/// What went wrong, and where in the expression's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExprError {
    /// Byte range in the expression's text.
    pub span: Range<usize>,
    /// The kind of error (stable names, shared with the Python evaluator's table).
    pub kind: ExprErrorKind,
    /// What, in words.
    pub message: String,
}

/// Kinds of expression errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExprErrorKind {
    /// Not a well-formed expression.
    Syntax,
    /// A name that is neither a param, a derived param nor (for launch) a problem key.
    UnknownName,
    /// Division or remainder by zero.
    DivisionByZero,
    /// A value that is not an integer (an identifier-valued param).
    NotInteger,
    /// A result outside 64-bit integers.
    Overflow,
}

impl ExprErrorKind {
    /// The kind's name in `crates/kart-runtime/tests/data/expr.json`.
    pub fn name(self) -> &'static str {
        match self {
            ExprErrorKind::Syntax => "syntax",
            ExprErrorKind::UnknownName => "unknown_name",
            ExprErrorKind::DivisionByZero => "division_by_zero",
            ExprErrorKind::NotInteger => "not_integer",
            ExprErrorKind::Overflow => "overflow",
        }
    }
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A name's value during evaluation: an integer, or a non-integer (an identifier-valued
/// param), which is an error only if the expression uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// An integer.
    Int(i64),
    /// An identifier (`half`): not usable in arithmetic.
    Ident(&'a str),
}

/// Looks names up during evaluation.
pub trait Env {
    /// The value of `name`, or `None` when it is unknown.
    fn get(&self, name: &str) -> Option<Value<'_>>;
}

impl Env for BTreeMap<String, i64> {
    fn get(&self, name: &str) -> Option<Value<'_>> {
        BTreeMap::get(self, name).map(|v| Value::Int(*v))
    }
}

/// Two environments, the first one searched first.
pub struct Layered<'a, A: Env + ?Sized, B: Env + ?Sized>(pub &'a A, pub &'a B);

impl<A: Env + ?Sized, B: Env + ?Sized> Env for Layered<'_, A, B> {
    fn get(&self, name: &str) -> Option<Value<'_>> {
        self.0.get(name).or_else(|| self.1.get(name))
    }
}

impl Expr {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let tokens = tokenize(text)?;
        let mut parser = Parser {
            tokens,
            pos: 0,
            end: text.len(),
            nesting: 0,
        };
        let root = parser.or()?;
        if let Some(t) = parser.tokens.get(parser.pos) {
            return Err(syntax(
                t.span.clone(),
                format!("unexpected `{}`", t.text(text)),
            ));
        }
        Ok(Expr {
            text: text.to_string(),
            root,
        })
    }

    /// Every name the expression uses, with the span of its first use.
    pub fn names(&self) -> Vec<(&str, Range<usize>)> {
        let mut out: Vec<(&str, Range<usize>)> = Vec::new();
        fn walk<'a>(n: &'a Node, out: &mut Vec<(&'a str, Range<usize>)>) {
            match &n.kind {
                NodeKind::Int(_) => {}
                NodeKind::Name(s) => {
                    if !out.iter().any(|(o, _)| *o == s) {
                        out.push((s, n.span.clone()));
                    }
                }
                NodeKind::Not(a) | NodeKind::Neg(a) => walk(a, out),
                NodeKind::Binary(_, a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
                NodeKind::Call(_, args) => args.iter().for_each(|a| walk(a, out)),
            }
        }
        walk(&self.root, &mut out);
        out
    }
}

fn eval(n: &Node, env: &(impl Env + ?Sized)) -> Result<i64, ExprError> {
    let overflow = || ExprError {
        span: n.span.clone(),
        kind: ExprErrorKind::Overflow,
        message: "the result does not fit in a 64-bit integer".into(),
    };
    Ok(match &n.kind {
        NodeKind::Int(v) => *v,
        NodeKind::Name(name) => match env.get(name) {
            Some(Value::Int(v)) => v,
            Some(Value::Ident(s)) => {
                return Err(ExprError {
                    span: n.span.clone(),
                    kind: ExprErrorKind::NotInteger,
                    message: format!("`{name}` is `{s}`, not an integer"),
                });
            }
            None => {
                return Err(ExprError {
                    span: n.span.clone(),
                    kind: ExprErrorKind::UnknownName,
                    message: format!("unknown name `{name}`"),
                });
            }
        },
        NodeKind::Not(a) => i64::from(eval(a, env)? == 0),
        NodeKind::Neg(a) => eval(a, env)?.checked_neg().ok_or_else(overflow)?,
        NodeKind::Binary(BinOp::And, a, b) => i64::from(eval(a, env)? != 0 && eval(b, env)? != 0),
        NodeKind::Binary(BinOp::Or, a, b) => i64::from(eval(a, env)? != 0 || eval(b, env)? != 0),
        NodeKind::Binary(op, a, b) => {
            let (x, y) = (eval(a, env)?, eval(b, env)?);
            let by_zero = || ExprError {
                span: n.span.clone(),
                kind: ExprErrorKind::DivisionByZero,
                message: "division by zero".into(),
            };
            match op {
                BinOp::Eq => i64::from(x == y),
                BinOp::Ne => i64::from(x != y),
                BinOp::Lt => i64::from(x < y),
                BinOp::Le => i64::from(x <= y),
                BinOp::Gt => i64::from(x > y),
                BinOp::Ge => i64::from(x >= y),
                BinOp::Add => x.checked_add(y).ok_or_else(overflow)?,
                BinOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
                BinOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
                BinOp::Div if y == 0 => return Err(by_zero()),
                BinOp::Rem if y == 0 => return Err(by_zero()),
                BinOp::Div => x.checked_div(y).ok_or_else(overflow)?,
                BinOp::Rem => x.checked_rem(y).ok_or_else(overflow)?,
                BinOp::And | BinOp::Or => unreachable!("handled above"),
            }
        }
        NodeKind::Call(f, args) => {
            let mut values = Vec::with_capacity(args.len());
            for a in args {
                values.push(eval(a, env)?);
            }
            match f {
                Func::Min => values.iter().copied().min().unwrap_or(0),
                Func::Max => values.iter().copied().max().unwrap_or(0),
                Func::Cdiv => {
                    let (x, y) = (values[0], values[1]);
                    if y == 0 {
                        return Err(ExprError {
                            span: n.span.clone(),
                            kind: ExprErrorKind::DivisionByZero,
                            message: "division by zero in `cdiv`".into(),
                        });
                    }
                    let q = x.checked_div(y).ok_or_else(overflow)?;
                    // Round up where the exact quotient is positive and not whole.
                    if x % y != 0 && ((x < 0) == (y < 0)) {
                        q + 1
                    } else {
                        q
                    }
                }
            }
        }
    })
}

impl ExprError {
    /// A division-by-zero message quotes the operation's text.
    fn with_text(mut self, text: &str) -> ExprError {
        if self.kind == ExprErrorKind::DivisionByZero
            && let Some(part) = text.get(self.span.clone())
        {
            self.message = format!("division by zero in `{part}`");
        }
        self
    }
}

impl Expr {
    /// Evaluates over `env`; errors quote the part of the text that failed.
    pub fn evaluate(&self, env: &(impl Env + ?Sized)) -> Result<i64, ExprError> {
        eval(&self.root, env).map_err(|e| e.with_text(&self.text))
    }
}

fn syntax(span: Range<usize>, message: String) -> ExprError {
    ExprError {
        span,
        kind: ExprErrorKind::Syntax,
        message,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Int(i64),
    Name(String),
    Op(&'static str),
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    span: Range<usize>,
}

impl Token {
    fn text<'a>(&self, src: &'a str) -> &'a str {
        src.get(self.span.clone()).unwrap_or("")
    }
}

const OPS: [&str; 19] = [
    "&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "(", ")", ",", "=",
    "&",
];

fn tokenize(text: &str) -> Result<Vec<Token>, ExprError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                i += 1;
            }
            let digits = &text[start..i];
            let v = digits.parse::<i64>().map_err(|_| {
                if digits.bytes().all(|b| b.is_ascii_digit()) {
                    ExprError {
                        span: start..i,
                        kind: ExprErrorKind::Overflow,
                        message: format!("`{digits}` does not fit in a 64-bit integer"),
                    }
                } else {
                    syntax(start..i, format!("`{digits}` is not an integer"))
                }
            })?;
            out.push(Token {
                tok: Tok::Int(v),
                span: start..i,
            });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Name(text[start..i].to_string()),
                span: start..i,
            });
        } else {
            let Some(op) = OPS.iter().find(|op| text[i..].starts_with(**op)) else {
                let ch = text[i..].chars().next().unwrap_or('?');
                return Err(syntax(i..i + ch.len_utf8(), format!("unexpected `{ch}`")));
            };
            if *op == "=" || *op == "&" {
                return Err(syntax(
                    i..i + 1,
                    format!(
                        "unexpected `{op}` (write `{}`)",
                        if *op == "=" { "==" } else { "&&" }
                    ),
                ));
            }
            out.push(Token {
                tok: Tok::Op(op),
                span: i..i + op.len(),
            });
            i += op.len();
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    end: usize,
    /// Parentheses, calls and unary operators open around the current position.
    nesting: usize,
}

impl Parser {
    fn peek_op(&self) -> Option<&'static str> {
        match self.tokens.get(self.pos) {
            Some(Token {
                tok: Tok::Op(op), ..
            }) => Some(op),
            _ => None,
        }
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.peek_op() == Some(op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn here(&self) -> Range<usize> {
        self.tokens
            .get(self.pos)
            .map_or(self.end..self.end, |t| t.span.clone())
    }

    fn binary(
        &mut self,
        ops: &[(&'static str, BinOp)],
        next: fn(&mut Parser) -> Result<Node, ExprError>,
    ) -> Result<Node, ExprError> {
        let mut left = next(self)?;
        'outer: loop {
            for (text, op) in ops {
                if self.eat(text) {
                    let right = next(self)?;
                    left = Node::new(
                        left.span.start..right.span.end,
                        NodeKind::Binary(*op, Box::new(left), Box::new(right)),
                    )?;
                    continue 'outer;
                }
            }
            return Ok(left);
        }
    }

    fn or(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("||", BinOp::Or)], Parser::and)
    }

    fn and(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("&&", BinOp::And)], Parser::comparison)
    }

    fn comparison(&mut self) -> Result<Node, ExprError> {
        let left = self.sum()?;
        let ops = [
            ("==", BinOp::Eq),
            ("!=", BinOp::Ne),
            ("<=", BinOp::Le),
            (">=", BinOp::Ge),
            ("<", BinOp::Lt),
            (">", BinOp::Gt),
        ];
        for (text, op) in ops {
            if self.eat(text) {
                let right = self.sum()?;
                if let Some(next) = self.peek_op()
                    && ops.iter().any(|(t, _)| *t == next)
                {
                    return Err(syntax(
                        self.here(),
                        "comparisons do not chain: write `a < b && b < c`".into(),
                    ));
                }
                return Node::new(
                    left.span.start..right.span.end,
                    NodeKind::Binary(op, Box::new(left), Box::new(right)),
                );
            }
        }
        Ok(left)
    }

    fn sum(&mut self) -> Result<Node, ExprError> {
        self.binary(&[("+", BinOp::Add), ("-", BinOp::Sub)], Parser::product)
    }

    fn product(&mut self) -> Result<Node, ExprError> {
        self.binary(
            &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Rem)],
            Parser::unary,
        )
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        let start = self.here().start;
        for (op, make) in [
            ("!", NodeKind::Not as fn(Box<Node>) -> NodeKind),
            ("-", NodeKind::Neg),
        ] {
            if self.eat(op) {
                let a = self.nested(Parser::unary)?;
                return Node::new(start..a.span.end, make(Box::new(a)));
            }
        }
        self.atom()
    }

    /// Runs `inner` one level deeper; past [`MAX_DEPTH`] levels an error at the token
    /// where the nesting began, before the recursion can exhaust the stack.
    fn nested(
        &mut self,
        inner: fn(&mut Parser) -> Result<Node, ExprError>,
    ) -> Result<Node, ExprError> {
        if self.nesting >= MAX_DEPTH {
            let at = self
                .tokens
                .get(self.pos.saturating_sub(1))
                .map_or(self.end..self.end, |t| t.span.clone());
            return Err(too_deep(at));
        }
        self.nesting += 1;
        let node = inner(self);
        self.nesting -= 1;
        node
    }

    fn atom(&mut self) -> Result<Node, ExprError> {
        let Some(token) = self.tokens.get(self.pos).cloned() else {
            return Err(syntax(
                self.end..self.end,
                "the expression ends too soon".into(),
            ));
        };
        self.pos += 1;
        match token.tok {
            Tok::Int(v) => Node::new(token.span, NodeKind::Int(v)),
            Tok::Op("(") => {
                let inner = self.nested(Parser::or)?;
                let close = self.here();
                if !self.eat(")") {
                    return Err(syntax(close, "missing `)`".into()));
                }
                // The parentheses belong to the node, so a message quotes them.
                Ok(Node {
                    span: token.span.start..close.end,
                    ..inner
                })
            }
            Tok::Name(name) if self.peek_op() == Some("(") => {
                let func = match name.as_str() {
                    "min" => Func::Min,
                    "max" => Func::Max,
                    "cdiv" => Func::Cdiv,
                    _ => {
                        return Err(syntax(
                            token.span,
                            format!("unknown function `{name}` (there are min, max, cdiv)"),
                        ));
                    }
                };
                self.pos += 1;
                let mut args = Vec::new();
                if !self.eat(")") {
                    loop {
                        args.push(self.nested(Parser::or)?);
                        if self.eat(")") {
                            break;
                        }
                        if !self.eat(",") {
                            return Err(syntax(self.here(), "expected `,` or `)`".into()));
                        }
                    }
                }
                let span = token.span.start..self.tokens[self.pos - 1].span.end;
                let arity_ok = match func {
                    Func::Cdiv => args.len() == 2,
                    Func::Min | Func::Max => !args.is_empty(),
                };
                if !arity_ok {
                    return Err(syntax(
                        span,
                        format!(
                            "`{name}` takes {}",
                            if func == Func::Cdiv {
                                "two arguments"
                            } else {
                                "one or more arguments"
                            }
                        ),
                    ));
                }
                Node::new(span, NodeKind::Call(func, args))
            }
            Tok::Name(name) => Node::new(token.span, NodeKind::Name(name)),
            Tok::Op(op) => Err(syntax(token.span, format!("unexpected `{op}`"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One case of `crates/kart-runtime/tests/data/expr.json`.
    #[derive(serde::Deserialize)]
    struct Case {
        expr: String,
        #[serde(default)]
        env: BTreeMap<String, serde_json::Value>,
        value: Option<i64>,
        error: Option<String>,
        /// The error's span start (byte offset), where it matters.
        at: Option<usize>,
    }

    struct JsonEnv(BTreeMap<String, serde_json::Value>);
    impl Env for JsonEnv {
        fn get(&self, name: &str) -> Option<Value<'_>> {
            match self.0.get(name)? {
                serde_json::Value::Number(n) => n.as_i64().map(Value::Int),
                serde_json::Value::String(s) => Some(Value::Ident(s)),
                _ => None,
            }
        }
    }

    #[test]
    fn the_shared_table_of_cases() {
        let cases: Vec<Case> =
            serde_json::from_str(include_str!("../tests/data/expr.json")).unwrap();
        assert!(cases.len() >= 40);
        for c in cases {
            let got = Expr::parse(&c.expr).and_then(|e| e.evaluate(&JsonEnv(c.env.clone())));
            match (&got, c.value, &c.error) {
                (Ok(v), Some(want), None) => assert_eq!(*v, want, "{}", c.expr),
                (Err(e), None, Some(kind)) => {
                    assert_eq!(e.kind.name(), kind, "{}: {e}", c.expr);
                    if let Some(at) = c.at {
                        assert_eq!(e.span.start, at, "{}: {e}", c.expr);
                    }
                }
                _ => panic!(
                    "{}: got {got:?}, want {:?} / {:?}",
                    c.expr, c.value, c.error
                ),
            }
        }
    }

    #[test]
    fn names_are_listed_once_in_order() {
        let e = Expr::parse("cdiv(S, BLOCK_M) * B + S").unwrap();
        let names: Vec<&str> = e.names().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["S", "BLOCK_M", "B"]);
    }

    #[test]
    fn nesting_past_the_limit_is_an_error_not_a_stack_overflow() {
        let deep =
            |open: &str, close: &str, n: usize| format!("{}1{}", open.repeat(n), close.repeat(n));
        // 100,000 levels of every kind of nesting, and a chain as long.
        let chain = vec!["1"; 100_000].join(" + ");
        let calls = deep("min(", ")", 100_000);
        let cases = [
            deep("(", ")", 100_000),
            deep("!", "", 100_000),
            deep("-", "", 100_000),
            calls,
            chain,
        ];
        for text in &cases {
            let e = Expr::parse(text).expect_err("too deep");
            assert_eq!(e.kind, ExprErrorKind::Syntax);
            assert!(e.message.contains("nests more than 64 levels"), "{e}");
        }
        // The limit itself parses and evaluates.
        let ok = Expr::parse(&deep("(", ")", MAX_DEPTH - 1)).unwrap();
        assert_eq!(ok.evaluate(&BTreeMap::<String, i64>::new()).unwrap(), 1);
        let ok = Expr::parse(&vec!["1"; MAX_DEPTH].join(" + ")).unwrap();
        assert_eq!(
            ok.evaluate(&BTreeMap::<String, i64>::new()).unwrap(),
            MAX_DEPTH as i64
        );
        assert!(Expr::parse(&vec!["1"; MAX_DEPTH + 1].join(" + ")).is_err());
    }
}
