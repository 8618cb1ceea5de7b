"""Cloud SDK plumbing shared by the catalog refresh and the sweepers: calling AWS and Google Cloud
(retries, pacing, errors, credentials, a lean botocore)."""
