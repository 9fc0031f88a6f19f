"""The domain: one package per area over a small kernel (docs/development.md, "Layout")."""
