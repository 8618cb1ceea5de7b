"""What runs on the machine, rendered and pure: the boot script (``boot``) and the model server's
launch (``serving``)."""
