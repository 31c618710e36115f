//! `connector-host push` and `connector-host keygen`: publishing a component to an OCI
//! registry (optionally with a cosign signature) and making a cosign key pair, with no
//! other tool (CONTRACT.md §10). Both run locally, without a host.

use std::path::PathBuf;

use clap::Args;
use connector_distribution::{keygen, push, OciReference, RegistryAccess, SignatureKey};
use zeroize::Zeroizing;

use super::CliError;

/// The variable cosign reads a key's password from.
const ENV_COSIGN_PASSWORD: &str = "COSIGN_PASSWORD";

pub const PUSH_HELP: &str = "\
The component goes up as one OCI manifest: config application/vnd.wasm.config.v0+json and
one application/wasm layer (the layout wkg publishes). With --sign, a cosign signature of
the manifest digest is stored beside it (tag sha256-<hex>.sig); the key's password comes
from COSIGN_PASSWORD (empty when unset). A registry on a loopback address is reached over
plain HTTP, any other over HTTPS unless --insecure.

Prints the pinned reference (oci://registry/repository@sha256:...); --raw prints only the
manifest digest.

Examples (FILE.wasm is your component, REGISTRY a registry such as 127.0.0.1:5000 or ghcr.io,
USER your account there; on ghcr.io repositories live under the account in lower case, e.g.
oci://ghcr.io/octocat/echo:v1, and the password is a GitHub token that may write packages):
  connector-host keygen
  connector-host push FILE.wasm oci://REGISTRY/acme/echo:v1 --sign cosign.key
  connector-host push FILE.wasm oci://REGISTRY/acme/echo:v2 --username USER --password-env REGISTRY_TOKEN";

pub const KEYGEN_HELP: &str = "\
Writes PREFIX.key (cosign's encrypted private key, sealed with COSIGN_PASSWORD, empty when
unset) and PREFIX.pub (PEM). Give PREFIX.pub to hosts as trust.keys; sign with
`connector-host push ... --sign PREFIX.key` (or with cosign itself: the files are cosign's).
Refuses to overwrite existing files.

Example:
  connector-host keygen --out release";

/// `connector-host push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The component (`.wasm`).
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,
    /// Where to publish it: oci://<registry>/<repository>:<tag>.
    #[arg(value_name = "oci://REGISTRY/REPOSITORY:TAG")]
    pub reference: String,
    /// Sign the manifest with this cosign private key.
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
    /// Registry user name.
    #[arg(long, requires = "password_env")]
    pub username: Option<String>,
    /// The environment variable holding the registry password.
    #[arg(long, value_name = "VAR", requires = "username")]
    pub password_env: Option<String>,
    /// Allow plain HTTP to a registry that is not on a loopback address.
    #[arg(long)]
    pub insecure: bool,
    /// Print only the manifest digest.
    #[arg(long)]
    pub raw: bool,
}

/// `connector-host keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Write PREFIX.key and PREFIX.pub.
    #[arg(long, value_name = "PREFIX", default_value = "cosign")]
    pub out: PathBuf,
    /// Print only the public key's id.
    #[arg(long)]
    pub raw: bool,
}

fn password() -> Zeroizing<String> {
    Zeroizing::new(std::env::var(ENV_COSIGN_PASSWORD).unwrap_or_default())
}

/// Runs `push`.
pub async fn run_push(args: PushArgs) -> Result<(), CliError> {
    let reference =
        OciReference::parse(&args.reference).map_err(|e| CliError::usage(e.to_string()))?;
    let component = std::fs::read(&args.file)
        .map_err(|e| CliError::usage(format!("could not read {}: {e}", args.file.display())))?;
    let signer = match &args.sign {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::usage(format!("could not read {}: {e}", path.display())))?;
            let key = SignatureKey::from_encrypted_pem(&text, password().as_bytes())
                .map_err(|e| CliError::usage(format!("{}: {e}", path.display())))?;
            Some(key)
        }
        None => None,
    };
    let password = match &args.password_env {
        Some(var) => Some(std::env::var(var).map_err(|_| {
            CliError::usage(format!("--password-env names {var}, which is not set"))
        })?),
        None => None,
    };
    let access = RegistryAccess {
        username: args.username.clone(),
        password,
        insecure: args.insecure,
    };
    let pushed = push(&component, &reference, &access, signer.as_ref())
        .await
        .map_err(|e| CliError::failed(e.to_string()))?;
    if args.raw {
        super::print_out(&format!("{}\n", pushed.manifest_digest));
        return Ok(());
    }
    let signed = match (&pushed.signature_tag, &signer) {
        (Some(tag), Some(key)) => format!(", signed by {} ({tag})", key.public().id()),
        _ => String::new(),
    };
    super::print_out(&format!("pushed {}{signed}\n", pushed.source));
    Ok(())
}

/// Runs `keygen`.
pub fn run_keygen(args: KeygenArgs) -> Result<(), CliError> {
    let key_path = with_suffix(&args.out, "key");
    let pub_path = with_suffix(&args.out, "pub");
    for path in [&key_path, &pub_path] {
        if path.exists() {
            return Err(CliError::failed(format!(
                "{} exists; choose another --out PREFIX or move it away",
                path.display()
            )));
        }
    }
    let pair = keygen(password().as_bytes()).map_err(|e| CliError::failed(e.to_string()))?;
    write_private(&key_path, pair.private_pem.as_bytes())?;
    std::fs::write(&pub_path, &pair.public_pem)
        .map_err(|e| CliError::failed(format!("could not write {}: {e}", pub_path.display())))?;
    if args.raw {
        super::print_out(&format!("{}\n", pair.key_id));
    } else {
        super::print_out(&format!(
            "wrote {} and {} (key {})\n",
            key_path.display(),
            pub_path.display(),
            pair.key_id
        ));
    }
    Ok(())
}

fn with_suffix(prefix: &std::path::Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_os_string();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

/// Writes the private key readable by its owner only.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .map_err(|e| CliError::failed(format!("could not create {}: {e}", path.display())))?;
    file.write_all(bytes)
        .map_err(|e| CliError::failed(format!("could not write {}: {e}", path.display())))
}
