"""`allows` (tests/infra.py), by which the infra tests read the stage policies, evaluates a policy as
IAM does: actions case-insensitively, keys of the request context case-insensitively, and exactly
the condition operators the policies use, each with IAM's rules for an absent key (ForAllValues
holds for an absent key). Any other operator fails the test rather than pass unevaluated.

moto's own evaluator cannot stand in (moto 5.2.5: moto/iam/access_control.py,
`IAMPolicyStatement._check_conditions`): its conditions (moto/iam/policy_conditions.py) know
StringEquals alone, hold it for an absent key, and pass every other operator unevaluated.
"""

from __future__ import annotations

import pytest

from tests.iam import allows
from tests.infra import KEY_ARN


def test_allows_evaluates_conditions_as_iam_does() -> None:
    document = {"Statement": [{
        "Effect": "Allow", "Action": "kms:Decrypt", "Resource": "arn:aws:kms:*:*:key/*",
        "Condition": {"ForAnyValue:StringEquals": {"kms:ResourceAliases": "alias/a"},
                      "ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["k1", "k2"]},
                      "Null": {"kms:EncryptionContextKeys": "false"}},
    }]}
    good = {"kms:ResourceAliases": ["alias/b", "alias/a"], "kms:EncryptionContextKeys": ["k1"]}
    assert allows(document, "kms:Decrypt", KEY_ARN, good)
    assert allows(document, "KMS:decrypt", KEY_ARN, {name.upper(): value for name, value in good.items()})
    assert not allows(document, "kms:Decrypt", KEY_ARN, good | {"kms:ResourceAliases": ["alias/b"]})
    assert not allows(document, "kms:Decrypt", KEY_ARN, {"kms:EncryptionContextKeys": ["k1"]})  # no alias
    assert not allows(document, "kms:Decrypt", KEY_ARN, good | {"kms:EncryptionContextKeys": ["k1", "k3"]})
    assert not allows(document, "kms:Decrypt", KEY_ARN, {"kms:ResourceAliases": ["alias/a"]})  # no context
    assert not allows(document, "kms:Decrypt", KEY_ARN)
    assert not allows(document, "kms:Encrypt", KEY_ARN, good)
    assert not allows(document, "kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:alias/a", good)
    single = {"Statement": [{"Effect": "Allow", "Action": "kms:Encrypt", "Resource": "*",
                             "Condition": {"StringEquals": {"kms:RequestAlias": "alias/a"}}}]}
    assert allows(single, "kms:Encrypt", KEY_ARN, {"kms:RequestAlias": "alias/a"})
    assert not allows(single, "kms:Encrypt", KEY_ARN, {"kms:RequestAlias": "alias/b"})
    assert not allows(single, "kms:Encrypt", KEY_ARN)
    like = {"Statement": [{"Effect": "Allow", "Action": "kms:Decrypt", "Resource": "*",
                           "Condition": {"StringLike": {"kms:ViaService": "ssm.*.amazonaws.com",
                                                        "kms:EncryptionContext:PSARN": "arn:*:p/a?"}}}]}
    via = {"kms:ViaService": "ssm.eu-west-1.amazonaws.com", "kms:EncryptionContext:PSARN": "arn:x:p/ab"}
    assert allows(like, "kms:Decrypt", KEY_ARN, via)
    assert not allows(like, "kms:Decrypt", KEY_ARN, via | {"kms:ViaService": "sqs.eu-west-1.amazonaws.com"})
    assert not allows(like, "kms:Decrypt", KEY_ARN, via | {"kms:ViaService": "SSM.eu-west-1.amazonaws.com"})
    assert not allows(like, "kms:Decrypt", KEY_ARN, via | {"kms:EncryptionContext:PSARN": "arn:x:p/abc"})
    assert not allows(like, "kms:Decrypt", KEY_ARN, {"kms:ViaService": "ssm.eu-west-1.amazonaws.com"})
    unknown = {"Statement": [{"Effect": "Allow", "Action": "kms:Encrypt", "Resource": "*",
                              "Condition": {"StringNotEquals": {"kms:RequestAlias": "alias/b"}}}]}
    with pytest.raises(AssertionError, match="cannot evaluate"):
        allows(unknown, "kms:Encrypt", KEY_ARN, {"kms:RequestAlias": "alias/a"})
