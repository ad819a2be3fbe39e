"""Task metrics computed through attnlens models."""
