/*
 * map.c: a hash map from strings to pointers (open addressing, linear
 * probing), for finding a subscription by organization id or by token
 * among many thousands.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "map.h"

/* A deleted slot: probing goes on past it. */
static const char tombstone[] = "";

/* FNV-1a. */
static size_t
hash(const char *key)
{
	uint64_t	h = 14695981039346656037ULL;

	for (const unsigned char *p = (const unsigned char *) key; *p; p++)
	{
		h ^= *p;
		h *= 1099511628211ULL;
	}
	return (size_t) h;
}

/* The slot of key, or of the first free slot where it would go. */
static size_t
find(const ehi_map *m, const char *key, int *found)
{
	size_t		mask = m->cap - 1;
	size_t		i = hash(key) & mask;
	size_t		reuse = (size_t) -1;

	*found = 0;
	for (;;)
	{
		const char *k = m->keys[i];

		if (k == NULL)
			return reuse != (size_t) -1 ? reuse : i;
		if (k == tombstone)
		{
			if (reuse == (size_t) -1)
				reuse = i;
		}
		else if (strcmp(k, key) == 0)
		{
			*found = 1;
			return i;
		}
		i = (i + 1) & mask;
	}
}

void *
ehi_map_get(const ehi_map *m, const char *key)
{
	int			found;
	size_t		i;

	if (m->count == 0)
		return NULL;
	i = find(m, key, &found);
	return found ? m->values[i] : NULL;
}

/* Rebuilds the table with ncap slots; -1 when out of memory. */
static int
resize(ehi_map *m, size_t ncap)
{
	ehi_map		n = {calloc(ncap, sizeof(char *)), calloc(ncap, sizeof(void *)), ncap, 0, 0};

	if (!n.keys || !n.values)
	{
		free(n.keys);
		free(n.values);
		return -1;
	}
	for (size_t i = 0; i < m->cap; i++)
	{
		if (m->keys[i] && m->keys[i] != tombstone)
		{
			int			found;
			size_t		j = find(&n, m->keys[i], &found);

			n.keys[j] = m->keys[i];
			n.values[j] = m->values[i];
			n.count++;
			n.used++;
		}
	}
	free(m->keys);
	free(m->values);
	*m = n;
	return 0;
}

int
ehi_map_put(ehi_map *m, const char *key, void *value)
{
	int			found;
	size_t		i;

	/* At most half full, counting deleted slots. */
	if ((m->used + 1) * 2 > m->cap &&
		resize(m, m->cap == 0 ? 16 : (m->count + 1) * 4 > m->cap ? m->cap * 2 : m->cap) != 0)
		return -1;
	i = find(m, key, &found);
	if (!found)
	{
		if (m->keys[i] == NULL)
			m->used++;
		m->count++;
	}
	m->keys[i] = key;
	m->values[i] = value;
	return 0;
}

void
ehi_map_remove(ehi_map *m, const char *key)
{
	int			found;
	size_t		i;

	if (m->count == 0)
		return;
	i = find(m, key, &found);
	if (!found)
		return;
	m->keys[i] = tombstone;
	m->values[i] = NULL;
	m->count--;
}

void
ehi_map_free(ehi_map *m)
{
	free(m->keys);
	free(m->values);
	memset(m, 0, sizeof(*m));
}
