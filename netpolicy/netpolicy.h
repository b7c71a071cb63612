/*
 * netpolicy: nftables rulesets for sluice, built as a pure model and applied
 * over netlink with libnftnl + libmnl in one atomic batch. This library
 * never includes proxy/ headers, never logs and never exits: errors are
 * reported in a caller-supplied "why" buffer (STYLE.md §4).
 */
#ifndef SLUICE_NETPOLICY_H
#define SLUICE_NETPOLICY_H

#endif
