"""Ethernet control-frame codecs (pure): PAUSE/PFC, 802.1Qau CNM, DMP, LLDP."""
