//! TLS for the gateway's listener (rustls), from PEM files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A certificate chain and its key, ready to accept connections. Cheap to
/// clone.
#[derive(Clone)]
pub struct Tls {
    pub(crate) acceptor: TlsAcceptor,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {what} {path}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("the certificate and key do not make a usable server configuration")]
    Config(#[source] rustls::Error),
}

impl Tls {
    /// Reads a PEM certificate chain (the server's first) and its PEM
    /// private key (PKCS#8, PKCS#1 or SEC1). The key's contents never
    /// appear in an error.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let read = |what, path: &Path| {
            let path = path.to_owned();
            move |source| TlsError::Read { what, path, source }
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(read("the certificate", cert))?
            .collect::<Result<_, _>>()
            .map_err(read("the certificate", cert))?;
        if chain.is_empty() {
            return Err(TlsError::NoCertificate {
                path: cert.to_owned(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(read("the key", key))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Config)?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(TlsError::Config)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}
