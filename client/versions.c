/*
 * versions.c: what a subscription remembers of the versions it delivered
 * and of those notifications named (see internal.h).
 */
#include <stdio.h>
#include <string.h>

#include "versions.h"

void
ehi_versions_reset(ehi_versions *v)
{
	memset(v, 0, sizeof(*v));
}

static int
recently_delivered(const ehi_versions *v, const char *version)
{
	for (int i = 0; i < EHI_RECENT_VERSIONS; i++)
		if (v->recent[i][0] && strcmp(v->recent[i], version) == 0)
			return 1;
	return 0;
}

void
ehi_versions_delivered(ehi_versions *v, const char *version)
{
	snprintf(v->recent[v->next], sizeof(v->recent[v->next]), "%s", version);
	v->next = (v->next + 1) % EHI_RECENT_VERSIONS;
	for (int i = 0; i < v->npending; i++)
	{
		if (strcmp(v->pending[i], version) == 0)
		{
			memmove(v->pending[i], v->pending[i + 1],
					sizeof(v->pending[0]) * (v->npending - i - 1));
			v->npending--;
			break;
		}
	}
}

int
ehi_versions_notified(ehi_versions *v, const char *version)
{
	if (recently_delivered(v, version))
		return 0;
	if (v->npending >= 0 && v->npending < EHI_PENDING_VERSIONS)
	{
		snprintf(v->pending[v->npending], sizeof(v->pending[0]), "%s", version);
		v->npending++;
	}
	else
		v->npending = -1;
	return 1;
}

int
ehi_versions_pending(const ehi_versions *v)
{
	return v->npending != 0;
}

void
ehi_versions_clear_pending(ehi_versions *v)
{
	v->npending = 0;
}
