"""AWS's half of ``gpufit status``: the stack bucket's ``status/`` objects, read with boto3 (S3
``ListObjectsV2`` and ``GetObject``; the instance role's bucket policy allows both to the
stack's deployer as to the machines)."""

from __future__ import annotations

from typing import Any

from machine.status import PREFIX, StatusReadError


def read_objects(bucket: str, client: Any = None, region: str | None = None) -> dict[str, str]:
    """Every object under ``status/``: key → text."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    s3 = client or boto3.client("s3", region_name=region)
    found: dict[str, str] = {}
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=PREFIX):
            for item in page.get("Contents", []):
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                found[item["Key"]] = body.decode("utf-8", "replace")
    except NoCredentialsError:
        raise StatusReadError("aws: no credentials (aws configure, or AWS_PROFILE)") from None
    except ClientError as err:
        code = err.response.get("Error", {}).get("Code", "?")
        raise StatusReadError(
            f"aws: s3://{bucket}: {code}: {err.response.get('Error', {}).get('Message', err)}"
        ) from None
    except BotoCoreError as err:
        raise StatusReadError(f"aws: s3://{bucket}: {err}") from None
    return found
