'use strict'

const { z } = require('zod')
const { from, lastValueFrom } = require('rxjs')
const { filter, toArray } = require('rxjs/operators')

const Query = z.object({ query: z.string().max(100) })

exports.find = async (input) => {
  const { query } = Query.parse(input)
  return lastValueFrom(from(['apples', 'pears', 'plums']).pipe(filter((name) => name.includes(query)), toArray()))
}
