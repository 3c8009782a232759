"""What the tasks run: provision, validate (and its rack and out-of-band steps),
calibrate, the offline bundle, the demo."""
