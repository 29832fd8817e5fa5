//! SQL identifiers, validated once and always emitted quoted.

use std::fmt;

/// The longest identifier Postgres keeps: `NAMEDATALEN - 1` bytes. Longer names are silently
/// truncated by the server, so two distinct long names could address the same object; they are
/// refused instead.
pub const MAX_IDENT_LEN: usize = 63;

/// Why a string is not a usable identifier.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdentError {
    /// The identifier is empty (`""` is not a valid quoted identifier).
    #[error("an SQL identifier must not be empty")]
    Empty,
    /// The identifier contains a NUL byte, which Postgres cannot store.
    #[error("SQL identifier {0:?} contains a NUL byte")]
    Nul(String),
    /// The identifier is longer than [`MAX_IDENT_LEN`] bytes and would be truncated.
    #[error("SQL identifier {ident:?} is {len} bytes long; Postgres keeps at most {max}")]
    TooLong {
        /// The identifier given.
        ident: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// One SQL identifier (a table, schema or column name), used exactly as given.
///
/// Any text except the empty string and NUL is accepted, including quotes, spaces, dots and
/// upper case, because the identifier is always emitted as a quoted identifier: wrapped in `"`
/// with every `"` doubled. Quoted identifiers are case-sensitive: `Ident::new("Users")` names
/// `"Users"`, not the `users` an unquoted `Users` folds to.
///
/// ```
/// use lease_postgres::Ident;
/// assert_eq!(Ident::new("state")?.quoted(), r#""state""#);
/// assert_eq!(Ident::new(r#"we"ird table"#)?.quoted(), r#""we""ird table""#);
/// assert!(Ident::new("").is_err());
/// assert!(Ident::new("a\0b").is_err());
/// # Ok::<(), lease_postgres::IdentError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ident(String);

impl Ident {
    /// Validates an identifier: non-empty, no NUL, at most [`MAX_IDENT_LEN`] bytes.
    pub fn new(s: impl Into<String>) -> Result<Ident, IdentError> {
        let s = s.into();
        if s.is_empty() {
            return Err(IdentError::Empty);
        }
        if s.contains('\0') {
            return Err(IdentError::Nul(s));
        }
        if s.len() > MAX_IDENT_LEN {
            let len = s.len();
            return Err(IdentError::TooLong {
                ident: s,
                len,
                max: MAX_IDENT_LEN,
            });
        }
        Ok(Ident(s))
    }

    /// An identifier known valid at compile time (a constant of this crate).
    pub(crate) fn trusted(s: &'static str) -> Ident {
        debug_assert!(Ident::new(s).is_ok(), "{s:?} is not a valid identifier");
        Ident(s.to_owned())
    }

    /// The identifier as given (unquoted).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The identifier as SQL text: `"` + the name with every `"` doubled + `"`.
    pub fn quoted(&self) -> String {
        let mut out = String::with_capacity(self.0.len() + 2);
        self.write_quoted(&mut out);
        out
    }

    fn write_quoted(&self, out: &mut String) {
        out.push('"');
        for c in self.0.chars() {
            if c == '"' {
                out.push('"');
            }
            out.push(c);
        }
        out.push('"');
    }
}

impl fmt::Debug for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// The quoted form, ready to splice into SQL.
impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted())
    }
}

impl TryFrom<&str> for Ident {
    type Error = IdentError;
    fn try_from(s: &str) -> Result<Ident, IdentError> {
        Ident::new(s)
    }
}

impl TryFrom<String> for Ident {
    type Error = IdentError;
    fn try_from(s: String) -> Result<Ident, IdentError> {
        Ident::new(s)
    }
}

/// A table name, optionally qualified by a schema, given as separate parts.
///
/// A dot inside a part is part of the name, never a separator: `QualifiedName::new("a.b")`
/// names the table `"a.b"` on the search path; `QualifiedName::with_schema("a", "b")` names
/// table `"b"` in schema `"a"`.
///
/// ```
/// use lease_postgres::QualifiedName;
/// assert_eq!(QualifiedName::new("jobs")?.to_string(), r#""jobs""#);
/// assert_eq!(
///     QualifiedName::with_schema("app", "jobs")?.to_string(),
///     r#""app"."jobs""#
/// );
/// # Ok::<(), lease_postgres::IdentError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct QualifiedName {
    schema: Option<Ident>,
    name: Ident,
}

impl QualifiedName {
    /// A name resolved through the `search_path`.
    pub fn new(name: impl Into<String>) -> Result<QualifiedName, IdentError> {
        Ok(QualifiedName {
            schema: None,
            name: Ident::new(name)?,
        })
    }

    /// A name in `schema`.
    pub fn with_schema(
        schema: impl Into<String>,
        name: impl Into<String>,
    ) -> Result<QualifiedName, IdentError> {
        Ok(QualifiedName {
            schema: Some(Ident::new(schema)?),
            name: Ident::new(name)?,
        })
    }

    /// From already validated parts.
    pub fn from_parts(schema: Option<Ident>, name: Ident) -> QualifiedName {
        QualifiedName { schema, name }
    }

    /// The schema, if qualified.
    pub fn schema(&self) -> Option<&Ident> {
        self.schema.as_ref()
    }

    /// The unqualified name.
    pub fn name(&self) -> &Ident {
        &self.name
    }

    /// The quoted SQL text: `"schema"."name"` or `"name"`.
    pub fn quoted(&self) -> String {
        let mut out = String::new();
        if let Some(s) = &self.schema {
            s.write_quoted(&mut out);
            out.push('.');
        }
        self.name.write_quoted(&mut out);
        out
    }
}

/// The quoted form, ready to splice into SQL.
impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.quoted())
    }
}

impl From<Ident> for QualifiedName {
    fn from(name: Ident) -> QualifiedName {
        QualifiedName { schema: None, name }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_doubles_quotes_and_keeps_everything_else() {
        let cases = [
            ("plain", r#""plain""#),
            ("Upper", r#""Upper""#),
            ("sel ect", r#""sel ect""#),
            (r#"we"ird table"#, r#""we""ird table""#),
            (r#"""#, r#""""""#),
            (r#"x"; DROP TABLE t; --"#, r#""x""; DROP TABLE t; --""#),
            ("a.b", r#""a.b""#),
            ("ünï", r#""ünï""#),
        ];
        for (raw, quoted) in cases {
            assert_eq!(Ident::new(raw).unwrap().quoted(), quoted, "{raw:?}");
        }
    }

    #[test]
    fn quoted_text_has_balanced_quotes() {
        // Every `"` inside is doubled, so the only odd-run quotes are the delimiters.
        for raw in [r#"a"b"#, r#"""""#, r#"a""b"#, r#"" OR 1=1 --"#] {
            let q = Ident::new(raw).unwrap().quoted();
            let inner = &q[1..q.len() - 1];
            let mut run = 0;
            for c in inner.chars() {
                if c == '"' {
                    run += 1;
                } else {
                    assert_eq!(run % 2, 0, "unescaped quote in {q}");
                    run = 0;
                }
            }
            assert_eq!(run % 2, 0, "unescaped quote at the end of {q}");
        }
    }

    #[test]
    fn invalid_identifiers_are_refused() {
        assert_eq!(Ident::new(""), Err(IdentError::Empty));
        assert!(matches!(Ident::new("a\0"), Err(IdentError::Nul(_))));
        assert!(Ident::new("x".repeat(MAX_IDENT_LEN)).is_ok());
        assert!(matches!(
            Ident::new("x".repeat(MAX_IDENT_LEN + 1)),
            Err(IdentError::TooLong { len: 64, .. })
        ));
        // Multibyte: the limit is in bytes, as Postgres counts it.
        assert!(Ident::new("é".repeat(32)).is_err());
        assert!(QualifiedName::with_schema("", "t").is_err());
        assert!(QualifiedName::with_schema("s", "").is_err());
    }

    #[test]
    fn qualified_names() {
        let q = QualifiedName::with_schema(r#"my "schema""#, "t t").unwrap();
        assert_eq!(q.quoted(), r#""my ""schema"""."t t""#);
        assert_eq!(q.to_string(), r#""my ""schema"""."t t""#);
        assert_eq!(QualifiedName::new("a.b").unwrap().quoted(), r#""a.b""#);
        assert_eq!(q.name().as_str(), "t t");
        assert_eq!(q.schema().map(Ident::as_str), Some(r#"my "schema""#));
    }
}
