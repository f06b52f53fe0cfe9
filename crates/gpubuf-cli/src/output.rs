//! What the commands print on stdout goes through [`write_stdout`]: one rule for a closed
//! pipe and for a stdout that cannot take the text.

use gpubuf::{Error, Result};

/// Writes `text` to stdout. A closed pipe (`gpubuf info | head`) ends the output quietly:
/// the reader wanted no more.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the I/O error when stdout cannot take it otherwise (a
/// full disk): the report is lost, which is the command's failure, not a panic.
pub fn write_stdout(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::invalid(format!("writing to stdout: {e}")))
        }
        _ => Ok(()),
    }
}
