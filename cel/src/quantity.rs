//! Exact Kubernetes `resource.Quantity` values.
//!
//! apimachinery's finest precision is nano units and it rounds anything finer
//! up (away from zero), so an `i128` count of nano units represents every
//! quantity exactly up to about 1.7e29 — far beyond any real capacity. Values
//! outside that range are rejected at parse time instead of being rounded.

use std::fmt;

/// Error returned by [`Quantity::parse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not match the quantity grammar.
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    /// The value does not fit the supported range.
    #[error("quantity out of range")]
    OutOfRange,
}

/// A Kubernetes quantity, stored exactly as a number of nano units.
///
/// Equality and ordering compare values, so `1Gi == 1073741824`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses `<signedNumber><suffix>` per apimachinery's grammar.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let b = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if let Some(&c) = b.first() {
            if c == b'+' || c == b'-' {
                negative = c == b'-';
                i = 1;
            }
        }
        let mut digits: Vec<u8> = Vec::new();
        let mut frac_len: i64 = 0;
        let mut seen_dot = false;
        let mut any_digit = false;
        while i < b.len() {
            match b[i] {
                c @ b'0'..=b'9' => {
                    any_digit = true;
                    if !(digits.is_empty() && c == b'0') {
                        digits.push(c - b'0');
                    }
                    if seen_dot {
                        frac_len += 1;
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if !any_digit {
            return Err(QuantityError::Format);
        }
        // Leading zeros were skipped; trailing fractional zeros carry no value.
        while seen_dot && frac_len > 0 && digits.last() == Some(&0) {
            digits.pop();
            frac_len -= 1;
        }
        let suffix = &s[i..];
        let (pow10, pow1024): (i64, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 1),
            "Mi" => (0, 2),
            "Gi" => (0, 3),
            "Ti" => (0, 4),
            "Pi" => (0, 5),
            "Ei" => (0, 6),
            _ => {
                let rest = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or(QuantityError::Format)?;
                let num = rest.strip_prefix('+').unwrap_or(rest);
                let body = num.strip_prefix('-').unwrap_or(num);
                if body.is_empty() || !body.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(QuantityError::Format);
                }
                let e: i64 = num.parse().map_err(|_| QuantityError::OutOfRange)?;
                (e, 0)
            }
        };
        let mut mantissa: u128 = 0;
        for d in &digits {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(u128::from(*d)))
                .ok_or(QuantityError::OutOfRange)?;
        }
        let mantissa = mantissa
            .checked_mul(1u128 << (10 * pow1024))
            .ok_or(QuantityError::OutOfRange)?;
        // nanos = mantissa * 10^(9 + pow10 - frac_len)
        let p = 9i64.saturating_add(pow10).saturating_sub(frac_len);
        let magnitude: u128 = if mantissa == 0 {
            0
        } else if p >= 0 {
            let scale = u32::try_from(p)
                .ok()
                .and_then(|p| 10u128.checked_pow(p))
                .ok_or(QuantityError::OutOfRange)?;
            mantissa
                .checked_mul(scale)
                .ok_or(QuantityError::OutOfRange)?
        } else {
            match u32::try_from(-p).ok().and_then(|p| 10u128.checked_pow(p)) {
                Some(div) => {
                    let q = mantissa / div;
                    if mantissa % div != 0 {
                        q + 1
                    } else {
                        q
                    }
                }
                // Divisor beyond u128: the value is a positive amount below
                // one nano unit, which apimachinery rounds up.
                None => 1,
            }
        };
        let nanos = i128::try_from(magnitude).map_err(|_| QuantityError::OutOfRange)?;
        Ok(Quantity {
            nanos: if negative { -nanos } else { nanos },
        })
    }

    /// Builds a quantity from an integer number of units.
    pub fn from_int(v: i64) -> Quantity {
        Quantity {
            nanos: i128::from(v) * NANO,
        }
    }

    /// A quantity of `nanos` nano units.
    pub fn from_nanos(nanos: i128) -> Quantity {
        Quantity { nanos }
    }

    /// The value in nano units.
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    pub(crate) fn checked_add(&self, o: &Quantity) -> Option<Quantity> {
        self.nanos
            .checked_add(o.nanos)
            .map(|nanos| Quantity { nanos })
    }

    pub(crate) fn checked_sub(&self, o: &Quantity) -> Option<Quantity> {
        self.nanos
            .checked_sub(o.nanos)
            .map(|nanos| Quantity { nanos })
    }

    /// The integer value, if the quantity is whole and fits in an i64
    /// (apimachinery's `AsInt64`).
    pub fn as_i64(&self) -> Option<i64> {
        if self.nanos % NANO != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANO).ok()
    }

    pub fn as_approximate_f64(&self) -> f64 {
        let whole = (self.nanos / NANO) as f64;
        let frac = (self.nanos % NANO) as f64 / 1e9;
        whole + frac
    }

    pub fn sign(&self) -> i64 {
        self.nanos.signum() as i64
    }
}

impl fmt::Display for Quantity {
    /// Plain decimal form (not apimachinery's canonical suffix form).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let whole = abs / NANO as u128;
        let frac = abs % NANO as u128;
        if frac == 0 {
            write!(f, "{sign}{whole}")
        } else {
            let s = format!("{frac:09}");
            write!(f, "{sign}{whole}.{}", s.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> i128 {
        Quantity::parse(s).unwrap().nanos()
    }

    #[test]
    fn parse_values() {
        assert_eq!(q("1"), NANO);
        assert_eq!(q("1Ki"), 1024 * NANO);
        assert_eq!(q("10Gi"), 10 * (1 << 30) * NANO);
        assert_eq!(q("1.5Gi"), 3 * (1 << 29) * NANO);
        assert_eq!(q("500m"), NANO / 2);
        assert_eq!(q("1n"), 1);
        assert_eq!(q("1u"), 1000);
        assert_eq!(q("1k"), 1000 * NANO);
        assert_eq!(q("1E"), 1_000_000_000_000_000_000 * NANO);
        assert_eq!(q("1e3"), 1000 * NANO);
        assert_eq!(q("1E3"), 1000 * NANO);
        assert_eq!(q("1e-3"), NANO / 1000);
        assert_eq!(q("-2.5"), -5 * NANO / 2);
        assert_eq!(q("+.5"), NANO / 2);
        assert_eq!(q("5."), 5 * NANO);
        assert_eq!(q("0.0000000001"), 1, "sub-nano rounds up");
        assert_eq!(q("1e-400"), 1);
        assert_eq!(q("0e99999"), 0);
        assert_eq!(q("000123"), 123 * NANO);
    }

    #[test]
    fn parse_errors() {
        for s in [
            "", "abc", "1.2.3", "1Gb", "1e", "1e+", " 1", "1 ", "--1", ".", "1KiB", "1e1.5",
        ] {
            assert_eq!(Quantity::parse(s), Err(QuantityError::Format), "{s}");
        }
        assert_eq!(Quantity::parse("1e40"), Err(QuantityError::OutOfRange));
        assert_eq!(
            Quantity::parse("99999999999999999999999999999999999999999"),
            Err(QuantityError::OutOfRange)
        );
        assert_eq!(
            Quantity::parse("1e99999999999999999999"),
            Err(QuantityError::OutOfRange)
        );
    }

    #[test]
    fn ordering_and_display() {
        assert!(Quantity::parse("1Gi").unwrap() > Quantity::parse("1G").unwrap());
        assert_eq!(
            Quantity::parse("1000m").unwrap(),
            Quantity::parse("1").unwrap()
        );
        assert_eq!(Quantity::parse("-1.25").unwrap().to_string(), "-1.25");
        assert_eq!(Quantity::parse("1.5").unwrap().as_i64(), None);
        assert_eq!(Quantity::parse("2k").unwrap().as_i64(), Some(2000));
    }
}
