//! Kubernetes resource quantities, parsed exactly as `k8s.io/apimachinery`'s
//! `resource.ParseQuantity` does, and read out as `Value()` / `MilliValue()` read them:
//! rounded up to the next integer of the requested scale.
//!
//! Grammar (from apimachinery `quantity.go`):
//! ```text
//! <quantity>     ::= <signedNumber><suffix>
//! <signedNumber> ::= <number> | +<number> | -<number>
//! <number>       ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>       ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>     ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>    ::= n | u | m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>
//! ```

use std::fmt;

/// A parsed quantity: `mantissa × 10^-frac_digits × base^exp`, kept exact so that
/// rounding happens once, at the scale the caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    frac_digits: u32,
    scale: Scale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    /// Multiply by 10^n (n may be negative: `m`, `u`, `n`, `e-3`).
    Decimal(i32),
    /// Multiply by 2^n (`Ki` = 2^10 ...).
    Binary(u32),
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format,
    #[error("unable to parse quantity's suffix")]
    Suffix,
    #[error("too many digits")]
    TooLong,
}

impl Quantity {
    /// Parses a quantity string such as `100m`, `1.5`, `1Gi`, `500M` or `2e3`.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let s = input.as_bytes();
        if s.is_empty() {
            return Err(QuantityError::Format);
        }
        let mut i = 0;
        let mut negative = false;
        match s[0] {
            b'+' => i += 1,
            b'-' => {
                negative = true;
                i += 1
            }
            _ => {}
        }
        let mut mantissa: u128 = 0;
        let mut digits = 0usize;
        let mut frac_digits = 0u32;
        let mut seen_dot = false;
        while i < s.len() {
            match s[i] {
                c @ b'0'..=b'9' => {
                    digits += 1;
                    // Leading zeros cost nothing; more than 38 significant digits cannot be exact.
                    if mantissa == 0 && c == b'0' {
                        if seen_dot {
                            frac_digits += 1;
                        }
                    } else {
                        mantissa = mantissa
                            .checked_mul(10)
                            .and_then(|m| m.checked_add(u128::from(c - b'0')))
                            .ok_or(QuantityError::TooLong)?;
                        if seen_dot {
                            frac_digits += 1;
                        }
                    }
                }
                b'.' if !seen_dot => seen_dot = true,
                _ => break,
            }
            i += 1;
        }
        if digits == 0 {
            return Err(QuantityError::Format);
        }
        let suffix = &input[i..];
        let scale = match suffix {
            "" => Scale::Decimal(0),
            "n" => Scale::Decimal(-9),
            "u" => Scale::Decimal(-6),
            "m" => Scale::Decimal(-3),
            "k" => Scale::Decimal(3),
            "M" => Scale::Decimal(6),
            "G" => Scale::Decimal(9),
            "T" => Scale::Decimal(12),
            "P" => Scale::Decimal(15),
            "E" => Scale::Decimal(18),
            "Ki" => Scale::Binary(10),
            "Mi" => Scale::Binary(20),
            "Gi" => Scale::Binary(30),
            "Ti" => Scale::Binary(40),
            "Pi" => Scale::Binary(50),
            "Ei" => Scale::Binary(60),
            _ => {
                let rest = suffix
                    .strip_prefix('e')
                    .or_else(|| suffix.strip_prefix('E'))
                    .ok_or_else(|| suffix_error(suffix))?;
                let digits = rest.strip_prefix(['+', '-']).unwrap_or(rest);
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(suffix_error(suffix));
                }
                let exp: i32 = rest.parse().map_err(|_| QuantityError::Suffix)?;
                Scale::Decimal(exp)
            }
        };
        Ok(Quantity {
            negative: negative && mantissa != 0,
            mantissa,
            frac_digits,
            scale,
        })
    }

    /// The value rounded up to an integer, as `Quantity.Value()` does; saturates at the
    /// i64 range like the apimachinery int64 fast path would refuse to go further.
    pub fn value(&self) -> i64 {
        self.scaled(0)
    }

    /// The value in thousandths rounded up, as `Quantity.MilliValue()` does.
    pub fn milli_value(&self) -> i64 {
        self.scaled(3)
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `ceil(self × 10^extra)` (away from zero for negatives, as apimachinery rounds up).
    fn scaled(&self, extra: i32) -> i64 {
        if self.mantissa == 0 {
            return 0;
        }
        let (mut exp10, exp2) = match self.scale {
            Scale::Decimal(e) => (e, 0u32),
            Scale::Binary(b) => (0, b),
        };
        exp10 += extra;
        exp10 -= self.frac_digits as i32;
        let mut num: u128 = self.mantissa;
        let mut den: u128 = 1;
        if exp2 > 0 {
            num = match num.checked_shl(exp2).filter(|v| v >> exp2 == num) {
                Some(v) => v,
                None => return self.saturate(),
            };
        }
        if exp10 >= 0 {
            for _ in 0..exp10 {
                num = match num.checked_mul(10) {
                    Some(v) => v,
                    None => return self.saturate(),
                };
            }
        } else {
            for _ in 0..(-exp10) {
                den = match den.checked_mul(10) {
                    Some(v) => v,
                    // The denominator exceeds any numerator: the value rounds up to 1.
                    None => return if self.negative { -1 } else { 1 },
                };
            }
        }
        let magnitude = num.div_ceil(den);
        if magnitude > i64::MAX as u128 {
            return self.saturate();
        }
        let v = magnitude as i64;
        if self.negative {
            -v
        } else {
            v
        }
    }

    fn saturate(&self) -> i64 {
        if self.negative {
            i64::MIN
        } else {
            i64::MAX
        }
    }
}

fn suffix_error(suffix: &str) -> QuantityError {
    if suffix
        .bytes()
        .all(|b| b"eEinumkKMGTP+-0123456789".contains(&b))
    {
        QuantityError::Suffix
    } else {
        QuantityError::Format
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.milli_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> i64 {
        Quantity::parse(s).unwrap().value()
    }
    fn m(s: &str) -> i64 {
        Quantity::parse(s).unwrap().milli_value()
    }

    #[test]
    fn parses_the_forms_kubernetes_accepts() {
        assert_eq!(m("100m"), 100);
        assert_eq!(m("1.5"), 1500);
        assert_eq!(m("1"), 1000);
        assert_eq!(m(".5"), 500);
        assert_eq!(m("5."), 5000);
        assert_eq!(m("+2"), 2000);
        assert_eq!(v("1Gi"), 1 << 30);
        assert_eq!(v("1.5Gi"), 3 << 29);
        assert_eq!(v("500M"), 500_000_000);
        assert_eq!(v("500Mi"), 500 << 20);
        assert_eq!(v("2e3"), 2000);
        assert_eq!(v("2E3"), 2000);
        assert_eq!(v("2e+3"), 2000);
        assert_eq!(m("2e-3"), 2);
        assert_eq!(v("32Gi"), 32 << 30);
        assert_eq!(v("110"), 110);
        assert_eq!(v("1k"), 1000);
        assert_eq!(v("1Ki"), 1024);
        assert_eq!(v("0"), 0);
        assert_eq!(v("-0"), 0);
    }

    #[test]
    fn rounds_up_like_value_and_milli_value() {
        // 1 nano-core is 1 milli-core once rounded up.
        assert_eq!(m("1n"), 1);
        assert_eq!(v("100m"), 1);
        assert_eq!(m("0.0001"), 1);
        assert_eq!(v("1.1"), 2);
        assert_eq!(m("1u"), 1);
        assert_eq!(m("1500u"), 2);
        assert_eq!(v("-1.5"), -2);
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for bad in [
            "", "Gi", "1 Gi", "1KiB", "1.5.5", "abc", "1e", "1e+", "1ee3", ".", "+", "1Gi1", "--1",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        assert_eq!(v("100Ei"), i64::MAX);
        assert_eq!(m("9223372036854775807"), i64::MAX);
        assert_eq!(v("1e100"), i64::MAX);
        assert_eq!(m("1e-100"), 1);
    }
}
