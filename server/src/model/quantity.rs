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

/// A parsed quantity, read out once at parse time as `Value()` and `MilliValue()` read
/// it. The digits are kept exact however many there are and whatever the exponent
/// (apimachinery's `inf.Dec` path), so no exponent or digit count can wrap the value:
/// every rounding happens once, upwards, at the scale asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    zero: bool,
    value: i64,
    milli: i64,
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
}

impl Quantity {
    /// Parses a quantity string such as `100m`, `1.5`, `1Gi`, `500M` or `2e3`.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let s = input.as_bytes();
        let mut i = 0;
        let mut negative = false;
        match s.first() {
            None => return Err(QuantityError::Format),
            Some(b'+') => i += 1,
            Some(b'-') => {
                negative = true;
                i += 1
            }
            _ => {}
        }
        let int_start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        let int = &s[int_start..i];
        let mut frac: &[u8] = &[];
        if i < s.len() && s[i] == b'.' {
            i += 1;
            let frac_start = i;
            while i < s.len() && s[i].is_ascii_digit() {
                i += 1;
            }
            frac = &s[frac_start..i];
        }
        if int.is_empty() && frac.is_empty() {
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
                // apimachinery parses the exponent as an int32: beyond it, a suffix error.
                let exp: i32 = rest.parse().map_err(|_| QuantityError::Suffix)?;
                Scale::Decimal(exp)
            }
        };
        // Leading zeros of the integer part and trailing zeros of the fraction carry no value.
        let int = &int[int.iter().position(|&b| b != b'0').unwrap_or(int.len())..];
        let frac = &frac[..frac.iter().rposition(|&b| b != b'0').map_or(0, |p| p + 1)];
        let zero = int.is_empty() && frac.is_empty();
        let value = ceil_scaled(int, frac, scale, 0);
        let milli = ceil_scaled(int, frac, scale, 3);
        let sign = |v: i64| if negative { -v } else { v };
        Ok(Quantity {
            negative: negative && !zero,
            zero,
            value: sign(value),
            milli: sign(milli),
        })
    }

    /// The value rounded up (away from zero) to an integer, as `Quantity.Value()` does.
    /// Values beyond the i64 range saturate, as apimachinery caps a quantity at
    /// 2^63-1 (it would wrap `MilliValue()` of such a value; this saturates it too).
    pub fn value(&self) -> i64 {
        self.value
    }

    /// The value in thousandths rounded up, as `Quantity.MilliValue()` does.
    pub fn milli_value(&self) -> i64 {
        self.milli
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    pub fn is_zero(&self) -> bool {
        self.zero
    }
}

/// `ceil(int.frac × scale × 10^extra)` in magnitude, saturated at `i64::MAX`, computed
/// on the digits themselves: exact for any exponent and any number of digits, in time
/// linear in the digits.
fn ceil_scaled(int: &[u8], frac: &[u8], scale: Scale, extra: i64) -> i64 {
    if int.is_empty() && frac.is_empty() {
        return 0;
    }
    let (exp10, exp2) = match scale {
        Scale::Decimal(e) => (i64::from(e) + extra, 0u32),
        Scale::Binary(b) => (extra, b),
    };
    // The digits `int ++ frac` with the decimal point moved to `point` (may lie outside).
    let len = (int.len() + frac.len()) as i64;
    let point = int.len() as i64 + exp10;
    let digit = |k: i64| -> u8 {
        if k < int.len() as i64 {
            int[k as usize] - b'0'
        } else {
            frac[(k - int.len() as i64) as usize] - b'0'
        }
    };
    // Integer part: digits [0, point), zeros past the end. 10^19 > i64::MAX already.
    let mut whole: u128 = 0;
    if point > 0 {
        // `int` has no leading zeros; `frac` (when `int` is empty) may, and has a nonzero digit.
        let first_nonzero = if int.is_empty() {
            frac.iter().position(|&b| b != b'0').unwrap_or(0) as i64
        } else {
            0
        };
        if first_nonzero < point && point - first_nonzero > 19 {
            return i64::MAX;
        }
        for k in 0..point.min(len) {
            whole = whole * 10 + u128::from(digit(k));
        }
        for _ in len..point {
            whole *= 10;
        }
    }
    // Fraction: digits [max(point, 0), len) behind `max(-point, 0)` zeros, times 2^exp2.
    let frac_from = point.max(0);
    let mut carry: u128 = 0;
    let mut fraction_left = false;
    if frac_from < len {
        let leading_zeros = (-point).max(0);
        if exp2 == 0 || leading_zeros > 19 {
            // Times 2^60 at most, a fraction below 10^-19 stays below 1.
            fraction_left = (frac_from..len).any(|k| digit(k) != 0);
        } else {
            let factor = 1u128 << exp2;
            for k in (frac_from..len).rev() {
                let t = u128::from(digit(k)) * factor + carry;
                fraction_left |= !t.is_multiple_of(10);
                carry = t / 10;
            }
            for _ in 0..leading_zeros {
                fraction_left |= !carry.is_multiple_of(10);
                carry /= 10;
            }
        }
    }
    let magnitude = (whole << exp2) + carry + u128::from(fraction_left);
    i64::try_from(magnitude).unwrap_or(i64::MAX)
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
    fn exponents_at_the_int32_edges_never_wrap() {
        // These wrapped an i32 exponent: a huge request read as 1m, a tiny node as infinite.
        assert_eq!(m("1e2147483647"), i64::MAX);
        assert_eq!(v("1e2147483647"), i64::MAX);
        assert_eq!(v("0.1e-2147483648"), 1);
        assert_eq!(m("0.1e-2147483648"), 1);
        assert_eq!(v("1e-2147483648"), 1);
        assert_eq!(v("0e2147483647"), 0);
        assert_eq!(v("100000e-2147483648"), 1);
        assert_eq!(v("1.5e2147483647"), i64::MAX);
        // apimachinery parses the exponent as int32: one more is a suffix error.
        assert_eq!(Quantity::parse("1e2147483648"), Err(QuantityError::Suffix));
        assert_eq!(Quantity::parse("1e-2147483649"), Err(QuantityError::Suffix));
    }

    #[test]
    fn any_number_of_digits_is_exact() {
        let long = format!("{}1", "0".repeat(5000));
        assert_eq!(v(&long), 1);
        assert_eq!(v(&format!("0.{}1", "0".repeat(5000))), 1);
        assert_eq!(m(&format!("0.{}1", "0".repeat(5000))), 1);
        assert_eq!(v(&format!("1{}", "0".repeat(40))), i64::MAX);
        assert_eq!(v(&format!("1.{}1", "0".repeat(60))), 2);
        assert_eq!(v(&format!("2.{}", "0".repeat(60))), 2);
        assert_eq!(v("100e-2"), 1);
        assert_eq!(v("100.00e-2"), 1);
        assert_eq!(v("101e-2"), 2);
        assert_eq!(v("9223372036854775807"), i64::MAX);
        assert_eq!(v("9223372036854775806.5"), i64::MAX);
        assert_eq!(v("9223372036854775805.5"), 9223372036854775806);
        assert_eq!(v("0.000000000000000000000000000000000000001Ei"), 1);
        assert_eq!(v("7.999999999999999999999Ei"), i64::MAX);
        assert_eq!(v("7.99999999999999999Ei"), 9223372036854775797);
        assert_eq!(v("0.5Ki"), 512);
        assert_eq!(v("0.0001Ki"), 1);
        assert_eq!(m("0.0001Ki"), 103);
        assert_eq!(Quantity::parse("0.001e3Ki"), Err(QuantityError::Suffix));
    }

    /// Decimal and binary quantities against exact rational arithmetic on small
    /// mantissas, over the whole range of exponents that can matter.
    #[test]
    fn matches_exact_arithmetic() {
        let mut state = 0x9e3779b97f4a7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let int = next() % 1_000_000;
            let frac_digits = (next() % 6) as u32;
            let frac = next() % 10u64.pow(frac_digits);
            let text_num = if frac_digits == 0 {
                int.to_string()
            } else {
                format!("{int}.{frac:0width$}", width = frac_digits as usize)
            };
            // The number as num / 10^frac_digits.
            let num = u128::from(int) * 10u128.pow(frac_digits) + u128::from(frac);
            let (suffix, mul2, exp10) = match next() % 3 {
                0 => {
                    let e = (next() % 61) as i32 - 30;
                    (format!("e{e}"), 0u32, e)
                }
                1 => {
                    let b = [10u32, 20, 30, 40, 50, 60][(next() % 6) as usize];
                    let s = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][(b / 10 - 1) as usize];
                    (s.to_string(), b, 0)
                }
                _ => {
                    let (s, e) = [("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("G", 9)]
                        [(next() % 6) as usize];
                    (s.to_string(), 0, e)
                }
            };
            let text = format!("{text_num}{suffix}");
            for extra in [0i32, 3] {
                // ceil(num × 2^mul2 × 10^(exp10 + extra) / 10^frac_digits), saturated.
                let e = exp10 + extra - frac_digits as i32;
                let n = num << mul2;
                let expected = if num == 0 {
                    0
                } else if e >= 0 {
                    10u128
                        .checked_pow(e as u32)
                        .and_then(|p| n.checked_mul(p))
                        .map_or(i64::MAX, |x| i64::try_from(x).unwrap_or(i64::MAX))
                } else {
                    match 10u128.checked_pow((-e) as u32) {
                        Some(d) => i64::try_from(n.div_ceil(d)).unwrap_or(i64::MAX),
                        None => 1,
                    }
                };
                let got = if extra == 0 { v(&text) } else { m(&text) };
                assert_eq!(got, expected, "{text} at 10^{extra}");
            }
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
