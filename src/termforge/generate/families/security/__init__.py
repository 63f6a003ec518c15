"""The security families, one module each: a stripped binary that hides a passphrase, an
upload-path guard graded on a hidden adversarial corpus, and brute-force logins found in rotated
sshd auth logs."""
