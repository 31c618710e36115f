//! Components a host ships with: an embedder or the `connector-host` binary hands them to
//! the core (`HostConfig::bundled`), which installs them at start; the core builds none.

/// A component shipped inside the program that runs the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BundledComponent {
    /// The slug it installs under.
    pub name: &'static str,
    /// The component's bytes.
    pub bytes: &'static [u8],
    /// `sha256:<hex>` of `bytes`, taken when they were embedded: a start that finds
    /// their compiled code in its cache does not hash them.
    pub digest: &'static str,
}
