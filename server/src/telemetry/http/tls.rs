//! The serving certificate: PEM files given, or a self-signed one made at start.

use super::*;

/// The TLS configuration: the certificate chain and key of `--tls-cert-file` and
/// `--tls-private-key-file` (PEM), or, without them, a self-signed certificate made
/// in memory for `localhost`, 127.0.0.1 and `bind` (when it names one address), as
/// kube-scheduler makes one when it is given none.
pub fn tls_config(
    cert_and_key: Option<(&Path, &Path)>,
    bind: IpAddr,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    let (chain, key) = match cert_and_key {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--tls-cert-file {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "--tls-cert-file {}: no CERTIFICATE in the file",
                    cert.display()
                ));
            }
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("--tls-private-key-file {}: {e}", key.display()))?;
            (chain, key)
        }
        None => {
            let mut ips = vec![IpAddr::from([127, 0, 0, 1])];
            if !bind.is_unspecified() && !ips.contains(&bind) {
                ips.push(bind);
            }
            self_signed("localhost", &ips)?
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| format!("the serving certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A self-signed ECDSA P-256 certificate for `dns` and `ips`, valid from an hour ago
/// for a year (kube-scheduler's self-signed certificate is valid a year too), and its
/// PKCS#8 key. Written in DER by hand: a dozen fixed structures, no X.509 crate.
pub fn self_signed(
    dns: &str,
    ips: &[IpAddr],
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    use ring::rand::SecureRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng)
        .map_err(|_| "cannot generate a key".to_string())?;
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .map_err(|_| "cannot read the generated key".to_string())?;

    let mut serial = [0u8; 16];
    rng.fill(&mut serial)
        .map_err(|_| "no random numbers".to_string())?;
    serial[0] = (serial[0] & 0x7f) | 0x40; // positive, minimal encoding

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = der::seq(&[der::set(&[der::seq(&[
        der::OID_COMMON_NAME.to_vec(),
        der::tlv(0x0c, format!("{dns}@{now}").as_bytes()),
    ])])]);
    let validity = der::seq(&[der::time(now - 3600), der::time(now + 365 * 86_400)]);
    let spki = der::seq(&[
        der::seq(&[der::OID_EC_PUBLIC_KEY.to_vec(), der::OID_P256.to_vec()]),
        der::bit_string(pair.public_key().as_ref()),
    ]);
    let mut alt_names = vec![der::tlv(0x82, dns.as_bytes())];
    for ip in ips {
        alt_names.push(match ip {
            IpAddr::V4(v4) => der::tlv(0x87, &v4.octets()),
            IpAddr::V6(v6) => der::tlv(0x87, &v6.octets()),
        });
    }
    let extension = |oid: &[u8], critical: bool, value: Vec<u8>| {
        let mut parts = vec![oid.to_vec()];
        if critical {
            parts.push(vec![0x01, 0x01, 0xff]);
        }
        parts.push(der::tlv(0x04, &value));
        der::seq(&parts)
    };
    let extensions = der::tlv(
        0xa3,
        &der::seq(&[
            // keyUsage: digitalSignature.
            extension(der::OID_KEY_USAGE, true, vec![0x03, 0x02, 0x07, 0x80]),
            // extKeyUsage: serverAuth.
            extension(
                der::OID_EXT_KEY_USAGE,
                false,
                der::seq(&[der::OID_SERVER_AUTH.to_vec()]),
            ),
            // basicConstraints: not a CA.
            extension(der::OID_BASIC_CONSTRAINTS, true, der::seq(&[])),
            extension(der::OID_SUBJECT_ALT_NAME, false, der::seq(&alt_names)),
        ]),
    );
    let algorithm = der::seq(&[der::OID_ECDSA_SHA256.to_vec()]);
    let tbs = der::seq(&[
        vec![0xa0, 0x03, 0x02, 0x01, 0x02], // version: v3
        der::tlv(0x02, &serial),
        algorithm.clone(),
        name.clone(),
        validity,
        name,
        spki,
        extensions,
    ]);
    let signature = pair
        .sign(&rng, &tbs)
        .map_err(|_| "cannot sign the certificate".to_string())?;
    let cert = der::seq(&[tbs, algorithm, der::bit_string(signature.as_ref())]);
    Ok((
        vec![CertificateDer::from(cert)],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.as_ref().to_vec())),
    ))
}

/// The few DER encodings a certificate needs.
pub(super) mod der {
    pub const OID_COMMON_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x04, 0x03];
    pub const OID_EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    pub const OID_P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    pub const OID_ECDSA_SHA256: &[u8] =
        &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    pub const OID_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x0f];
    pub const OID_SUBJECT_ALT_NAME: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x11];
    pub const OID_BASIC_CONSTRAINTS: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x13];
    pub const OID_EXT_KEY_USAGE: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x25];
    pub const OID_SERVER_AUTH: &[u8] =
        &[0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];

    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes: Vec<u8> = n
                .to_be_bytes()
                .into_iter()
                .skip_while(|b| *b == 0)
                .collect();
            out.push(0x80 | bytes.len() as u8);
            out.extend(bytes);
        }
        out.extend_from_slice(content);
        out
    }

    pub fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x30, &parts.concat())
    }

    pub fn set(parts: &[Vec<u8>]) -> Vec<u8> {
        tlv(0x31, &parts.concat())
    }

    pub fn bit_string(bits: &[u8]) -> Vec<u8> {
        let mut content = vec![0];
        content.extend_from_slice(bits);
        tlv(0x03, &content)
    }

    /// UTCTime before 2050, GeneralizedTime from then on (RFC 5280 4.1.2.5).
    pub fn time(unix: u64) -> Vec<u8> {
        let days = (unix / 86_400) as i64;
        let secs = unix % 86_400;
        let (y, m, d) = civil_from_days(days);
        let hms = format!("{:02}{:02}{:02}Z", secs / 3600, (secs / 60) % 60, secs % 60);
        if y < 2050 {
            tlv(0x17, format!("{:02}{m:02}{d:02}{hms}", y % 100).as_bytes())
        } else {
            tlv(0x18, format!("{y:04}{m:02}{d:02}{hms}").as_bytes())
        }
    }

    /// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard
    /// Hinnant's algorithm).
    pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
        let z = z + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let y = yoe + era * 400 + i64::from(m <= 2);
        (y, m, d)
    }
}
